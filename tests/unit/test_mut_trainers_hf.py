"""Kind hf-trainer (engine/trainers/hf/): the argv of a launch, the Trainer's checkpoint folders (whole and
sharded), trainer.args refused where they would override what the run config owns, and `runbook check`'s
parse probe (runbook/hf_parse_probe.py run as a real subprocess on a real script).

The probe here runs the script against a small stand-in for transformers' HfArgumentParser and
TrainingArguments (argparse over the same flags, put first on the script's PYTHONPATH through trainer.env):
importing transformers takes seconds, and what is tested is the probe's and runbook's handling of what a
parser does. transformers' own parser runs in the slow tier (tests/trainers/test_hf_parse_check.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from engine.observe.throughput import ProgressMeaning
from engine.observe.events import CheckpointSaving, Progress
from engine.trainers.hf import parse_check
from engine.trainers.hf.adapter import HFTrainerAdapter
from engine.trainers.hf.launch import hf_argv, launcher_of
from engine.trainers.hf.layout import MODEL, hf_layout
from engine.trainers.hf.settings import HFTrainerSettings, _flag, _truthy, args_problem
from engine.trainers.run_config import load_config

STAND_IN = '''\
"""A stand-in for transformers' argument parsing: argparse over the TrainingArguments flags runbook passes."""
import argparse
import json

FLAGS = {"output_dir": str, "per_device_train_batch_size": int, "gradient_accumulation_steps": int,
         "learning_rate": float, "max_steps": int, "save_steps": float, "save_strategy": str, "logging_steps": float,
         "seed": int, "report_to": str, "disable_tqdm": str, "logging_nan_inf_filter": str, "use_cpu": str,
         "resume_from_checkpoint": str, "save_total_limit": int, "block_size": int}


class TrainingArguments:
    def __init__(self, **values):
        self.__dict__.update(values)


class HfArgumentParser(argparse.ArgumentParser):
    def __init__(self, dataclass_types):
        super().__init__()
        for name, kind in FLAGS.items():
            self.add_argument("--" + name, type=kind)

    def parse_args_into_dataclasses(self, args=None):
        return (TrainingArguments(**vars(self.parse_args(args))),)

    def parse_dict(self, values):
        return (TrainingArguments(**values),)

    def parse_json_file(self, path):
        return self.parse_dict(json.load(open(path)))

    def parse_yaml_file(self, path):
        raise NotImplementedError
'''
PARSES = ("from transformers import HfArgumentParser, TrainingArguments\n"
          "(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()\n"
          "raise SystemExit('trained: the probe should have stopped the script')\n")


def hf_project(root: Path, script: str | None = PARSES, **trainer) -> Path:
    """A kind hf-trainer project (its own train.py) whose script finds the stand-in parser; its run config's path."""
    (root / "configs").mkdir(parents=True)
    (root / "stand_in").mkdir()
    (root / "stand_in" / "transformers.py").write_text(STAND_IN)
    if script is not None:
        (root / "train.py").write_text(script)
    config = {
        "micro_batch_size": 4, "batch_size": 8, "lr": 0.003, "save_interval": 4, "keep_last_k": 3, "seed": 7,
        "max_tokens": 24 * 8 * 32, "out_dir": "checkpoints/pretrain", "run_dir": "runs/pretrain",
        "model": {"block_size": 32},
        "data": {"train_dir": "data/train", "val_dir": "data/val", "tokenizer_dir": "data/tokenizer", "make_default": False},
        "trainer": {"kind": "hf-trainer", "device": "cpu", "script": "train.py", "preflight_parse": True,
                    "env": {"PYTHONPATH": str(root / "stand_in")}, **trainer},
    }
    (root / "configs" / "run_config.yaml").write_text(json.dumps(config, indent=1))
    return root / "configs" / "run_config.yaml"


# --- the argv of a launch -------------------------------------------------------------------------------

VALUES = {"python": "py", "out_dir": "out", "micro_batch_size": 2, "grad_accum": 4, "lr": "0.001", "max_steps": 10,
          "save_interval": 5, "seed": 1, "device": "cpu"}


def test_the_cpu_flag_is_passed_only_on_the_cpu():
    assert hf_argv(Path("t.py"), VALUES, [], None)[-2:] == ["--use_cpu", "true"]
    on_gpu = hf_argv(Path("t.py"), {**VALUES, "device": "cuda"}, [], None)
    assert "--use_cpu" not in on_gpu and on_gpu[-2:] == ["--logging_nan_inf_filter", "false"]


def test_a_resume_passes_the_checkpoints_folder_last():
    argv = hf_argv(Path("t.py"), VALUES, ["--block_size", "32"], Path("/out/checkpoint-8"))
    assert argv[:2] == ["py", "t.py"]
    assert argv[-4:] == ["--block_size", "32", "--resume_from_checkpoint", "/out/checkpoint-8"]
    assert "--resume_from_checkpoint" not in hf_argv(Path("t.py"), VALUES, [], None)


def test_one_device_runs_plain_python_and_two_run_torchrun():
    assert launcher_of([], 1, "{python}") == ["{python}"]
    assert launcher_of([], 2, "{python}") == ["{python}", "-m", "torch.distributed.run", "--standalone",
                                              "--nproc-per-node", "{devices}"]


def test_the_adapter_launches_the_script_with_the_run_configs_values(tmp_path):
    loaded = load_config(hf_project(tmp_path / "p"))
    adapter = HFTrainerAdapter()
    spec = adapter.prepare_launch(loaded, tmp_path / "launch", None, "sha256:x")
    assert spec.argv[:2] == [sys.executable, str(tmp_path / "p" / "train.py")]
    flags = dict(zip(spec.argv[2::2], spec.argv[3::2]))
    assert flags["--output_dir"] == str(loaded.out_dir) and flags["--per_device_train_batch_size"] == "4"
    assert flags["--gradient_accumulation_steps"] == "2" and flags["--max_steps"] == "24"
    assert json.loads((tmp_path / "launch" / "launch.json").read_text())["argv"] == spec.argv
    # a resume hands the checkpoint's folder (HF resumes from it), not the resume file runbook names
    resumed = adapter.prepare_launch(loaded, tmp_path / "launch2", loaded.out_dir / "checkpoint-8" / MODEL, "sha256:x")
    assert resumed.argv[-2:] == ["--resume_from_checkpoint", str(loaded.out_dir / "checkpoint-8")]
    assert adapter.progress_meaning(loaded.config) == ProgressMeaning(8 * 32, 8 * 32, 8 * 32)   # a line per optimizer step
    assert adapter.relocate_run_dir(None, tmp_path, tmp_path / "new") == 0
    assert adapter.share_run_data(tmp_path, tmp_path / "new") == []
    assert adapter.data_fingerprint(loaded) is None
    assert adapter.is_installed() is True          # transformers, accelerate and safetensors are in this env


def test_the_adapter_reads_the_callbacks_lines(tmp_path):
    adapter = HFTrainerAdapter()
    assert adapter.parse_line("runbook: step 7 loss 2.5 took 31.0 ms") == Progress(7, 7, 2.5, 31.0, True)
    saving = adapter.parse_line(f"runbook: saving {tmp_path / 'checkpoint-8'}")
    assert saving == CheckpointSaving(path=str(tmp_path / "checkpoint-8" / MODEL))
    assert adapter.parse_line("{'loss': 2.5}") is None


# --- checkpoints ----------------------------------------------------------------------------------------


def safetensors_file(path: Path, nan_at: int | None = None, size: int = 4, cut: int = 0) -> Path:
    """A real safetensors file of one float32 tensor `w` (NaN at `nan_at`); `cut` bytes left off its end."""
    import torch
    from safetensors.torch import save_file
    tensor = torch.ones(size)
    if nan_at is not None:
        tensor[nan_at] = float("nan")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"w": tensor}, str(path))
    if cut:
        path.write_bytes(path.read_bytes()[:-cut])
    return path


def shard(folder: Path, n: int, of: int, **kw) -> Path:
    return safetensors_file(folder / f"model-{n:05d}-of-{of:05d}.safetensors", **kw)


def test_a_sharded_save_resumes_from_its_first_shard_and_is_whole_only_with_every_shard(tmp_path):
    layout = hf_layout()
    folder = tmp_path / "checkpoint-8"
    shard(folder, 2, 2)
    assert layout.resume_file(folder) == folder / MODEL          # no first shard: the whole model's name
    shard(folder, 1, 2)
    assert layout.resume_file(folder) == folder / "model-00001-of-00002.safetensors"
    assert layout.weight_files(folder) == [folder / "model-00001-of-00002.safetensors",
                                           folder / "model-00002-of-00002.safetensors"]
    assert layout.looks_whole(folder)
    shard(folder, 1, 2, cut=3)                                   # the first shard cut short
    assert not layout.looks_whole(folder)
    shard(folder, 1, 2)
    (folder / "model-00002-of-00002.safetensors").unlink()       # a shard missing
    assert not layout.looks_whole(folder)


def test_an_unsharded_save_is_judged_by_model_safetensors(tmp_path):
    layout = hf_layout()
    folder = tmp_path / "checkpoint-4"
    assert layout.resume_file(tmp_path / "no-such-folder") == tmp_path / "no-such-folder" / MODEL
    folder.mkdir()
    assert layout.weight_files(folder) == [] and not layout.looks_whole(folder)
    safetensors_file(folder / MODEL)
    assert layout.resume_file(folder) == folder / MODEL and layout.weight_files(folder) == [folder / MODEL]
    assert layout.looks_whole(folder)
    assert layout.folder_name(4) == "checkpoint-4" and layout.step_of("checkpoint-12") == 12


def test_the_non_finite_search_stops_at_its_limit_across_shards(tmp_path):
    adapter = HFTrainerAdapter()
    folder = tmp_path / "checkpoint-8"
    shard(folder, 1, 2, nan_at=0)
    shard(folder, 2, 2, nan_at=1)

    class Saved:   # a checkpoint as the catalog lists it
        path = folder
        step = 8

    assert adapter.find_nonfinite(Saved, 1) == ["w"]
    assert adapter.find_nonfinite(Saved, 5) == ["w", "w"]
    plan = adapter.prepare_resume(Saved, None, tmp_path)
    assert (plan.file, plan.detail) == (folder / "model-00001-of-00002.safetensors", "from step 8")


# --- trainer.args ---------------------------------------------------------------------------------------


def test_a_flag_names_its_field():
    assert _flag("--") is None and _flag("-x") is None and _flag("value") is None
    assert _flag("--x") == "x"
    assert _flag("--learning-rate=1e-4") == "learning_rate"
    assert _flag("--seed=1=2") == "seed"


def test_a_trainingarguments_file_first_is_refused():
    problem = args_problem(["Args.JSON"])
    assert problem.startswith("'Args.JSON' as the script's first argument is a TrainingArguments file")
    assert args_problem(["--block_size", "args.yaml"]) is None     # a value elsewhere is no such file


def test_a_flag_runbook_owns_or_an_abbreviation_of_one_is_refused():
    assert args_problem(["--learning_rate", "1"]).startswith("'--learning_rate' is set by runbook from the run config")
    assert args_problem(["--block_size", "32", "--learning_rat", "1"]).startswith(
        "'--learning_rat' (argparse reads it as --learning_rate) is set by runbook")
    assert args_problem(["--save_st=1"]).startswith(
        "'--save_st=1' (an abbreviation of --save_steps, --save_strategy) is set by runbook")
    assert args_problem(["--block_size", "32", "--dataloader_num_workers", "0"]) is None


def test_save_only_model_is_refused_when_it_comes_on():
    for on, flag in ((["--save_only_model"], "--save_only_model"), (["--save_only_model", "true"], "--save_only_model"),
                     (["--save_only_model=yes"], "--save_only_model=yes"), (["--save_onl"], "--save_onl"),
                     (["--save_only_model", "--seed_data", "1"], "--save_only_model"),
                     (["--block_size", "32", "--save_only_model", "1"], "--save_only_model")):
        assert args_problem(on).startswith(f"{flag!r}: a checkpoint without"), on
    for off in (["--save_only_model", "false"], ["--save_only_model=No"], ["--save_only_model", "0"],
                ["--save_on"], ["--block_size", "32", "--save_only_model", "f"], ["--save_only_model", "n"]):
        assert args_problem(off) is None, off
    assert _truthy("--x", []) and _truthy("--x", ["--y"]) and not _truthy("--x=false", ["true"])
    assert _truthy("--x=true", ["false"]) and not _truthy("--x", ["false", "true"])
    assert _truthy("--x=no=yes", [])                    # the value is all after the first '=': no bool word


def test_the_settings_keep_the_launcher_and_the_args_they_validated():
    settings = HFTrainerSettings(kind="hf-trainer", launcher=["accelerate", "launch", "--num_processes", "{devices}"],
                                 args=["--block_size", "{block_size}"])
    assert settings.launcher == ["accelerate", "launch", "--num_processes", "{devices}"]
    assert settings.args == ["--block_size", "{block_size}"]
    with pytest.raises(ValueError, match="is set by runbook"):
        HFTrainerSettings(kind="hf-trainer", args=["--seed", "3"])


# --- the parse probe ------------------------------------------------------------------------------------


def test_a_missing_script_is_named_and_preflight_parse_off_checks_nothing_more(tmp_path):
    loaded = load_config(hf_project(tmp_path / "p", script=None))
    [problem] = HFTrainerAdapter().check_environment(loaded)
    assert "trainer.script: no file" in problem and str(tmp_path / "p" / "train.py") in problem
    loaded = load_config(hf_project(tmp_path / "q", script="raise SystemExit(3)\n", preflight_parse=False))
    assert HFTrainerAdapter().check_environment(loaded) == []


def test_a_script_whose_parser_takes_runbooks_flags_passes_the_check(tmp_path):
    loaded = load_config(hf_project(tmp_path / "p"))
    assert HFTrainerAdapter().check_environment(loaded) == []


def test_a_script_that_never_parses_its_arguments_is_refused(tmp_path):
    loaded = load_config(hf_project(tmp_path / "p", "print('no parser here')\n"))
    [problem] = HFTrainerAdapter().check_environment(loaded)
    assert problem.endswith(": trainer.script train.py: the script ended without parsing TrainingArguments with "
                            "HfArgumentParser: (no output)")


def test_a_script_that_forces_its_own_value_is_refused_with_the_field(tmp_path):
    script = PARSES.replace("parse_args_into_dataclasses()", "parse_args_into_dataclasses(__import__('sys').argv[1:] + "
                            "['--learning_rate', '0.01'])")
    loaded = load_config(hf_project(tmp_path / "p", script))
    [problem] = HFTrainerAdapter().check_environment(loaded)
    assert "train.py's own parser: learning_rate is 0.01 where runbook passes '0.003' (the run config's lr)" in problem


def probe(tmp_path: Path, script: str, argv_tail: list[str] = (), name: str = "p") -> dict:
    config = hf_project(tmp_path / name, script)
    loaded = load_config(config)
    from engine.trainers.script.launch import trainer_env
    return parse_check.probe(["python", str(tmp_path / name / "train.py"), *argv_tail], loaded.project_dir,
                             trainer_env(loaded))


def test_the_probe_returns_what_the_parser_took(tmp_path):
    result = probe(tmp_path, "print('{not json from the script')\n" + PARSES, ["--seed", "5", "--learning_rate", "0.5"])
    assert result == {"parsed": {"output_dir": None, "per_device_train_batch_size": None,
                                 "gradient_accumulation_steps": None, "learning_rate": 0.5, "max_steps": None,
                                 "save_steps": None, "seed": 5, "logging_steps": None, "save_only_model": None,
                                 "save_total_limit": None, "use_cpu": None}}


def test_a_parser_that_refuses_runbooks_flags_is_said_with_its_last_error_line(tmp_path):
    long = "x" * 400
    script = ("from transformers import HfArgumentParser, TrainingArguments\nimport sys\n"
              "sys.stderr.write('usage: train.py\\nerror: " + long + "\\n')\nraise SystemExit(2)\n")
    result = probe(tmp_path, script)
    assert result == {"error": "the script's parser exited 2 on runbook's arguments: " + ("error: " + long)[:300]}


def test_a_script_that_never_parses_or_dies_is_said(tmp_path):
    assert probe(tmp_path, "print('hello')\n") == {
        "error": "the script ended without parsing TrainingArguments with HfArgumentParser: (no output)"}
    died = probe(tmp_path, "import os\nos._exit(5)\n", name="q")
    assert died == {"error": "the probe exited 5: (no output)"}


def test_a_script_that_does_not_parse_in_time_is_said(tmp_path, monkeypatch):
    monkeypatch.setattr(parse_check, "PROBE_TIMEOUT_S", 0.5)
    assert probe(tmp_path, "import time\ntime.sleep(30)\n") == {
        "error": "the script did not parse its arguments within 0.5 s"}
