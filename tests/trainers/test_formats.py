"""The parts of the hf-trainer and script kinds without a run: the sdk's lines read back by the engine,
the checkpoint checks of safetensors / torch.save / JSON on real files, argv templates, settings errors
with file:line, and the metric tracker forgetting a dead launch's NaN."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from engine.observe.throughput import ProgressMeaning
from engine.checkpoints.manifest import verify_checkpoint
from engine.checkpoints.store import list_checkpoints
from engine.core.yaml_source import SourceError
from engine.observe.events import CheckpointSaving, Progress, Resumed, Validation
from engine.observe.observer import MetricTracker
from engine.trainers.hf.adapter import HFTrainerAdapter
from engine.trainers.hf.launch import hf_argv
from engine.trainers.run_config import load_config
from engine.trainers.script import template
from engine.trainers.script.adapter import ScriptAdapter
from engine.trainers.script.launch import argv_of
from tests.conftest import REPO
from tests.trainers.projects import TRAINERS, make_project


def sdk_lines(code: str) -> list[str]:
    """What runbook/sdk.py prints, from a real interpreter (as a user's script would)."""
    done = subprocess.run([sys.executable, "-c", f"from runbook import sdk\n{code}"], capture_output=True, text=True,
                          cwd=REPO, check=True)
    return done.stdout.splitlines()


def test_the_sdks_lines_are_read_back_as_events_by_both_adapters(tmp_path):
    printed = sdk_lines(f"sdk.progress(7, 2.5)\nsdk.progress(8, float('nan'))\nsdk.saving({str(tmp_path / 'step-000008')!r})\n"
                        f"sdk.resumed({str(tmp_path / 'step-000008' / 'state.pt')!r})")
    script, hf = ScriptAdapter(), HFTrainerAdapter()
    first, second, saving, resumed = (script.parse_line(line) for line in printed)
    assert isinstance(first, Progress) and (first.step, first.loss, first.is_step) == (7, 2.5, True)
    assert isinstance(second, Progress) and math.isnan(second.loss)   # the nan playbook reads it
    assert saving == CheckpointSaving(path=str(tmp_path / "step-000008" / "state.pt"))
    assert isinstance(resumed, Resumed)
    assert hf.parse_line(printed[2]) == CheckpointSaving(path=str(tmp_path / "step-000008" / "model.safetensors"))
    assert script.parse_line("runbook: step 3 loss abc took 1 ms") is None
    assert script.parse_line("runbook: step 3 loss 1.0 took 1 ms" + " " * 10_000) is None   # bounded


def test_a_validation_line_of_the_sdk_is_the_runs_val_loss():
    """HF's eval_loss reached nothing: status and report showed `val -` (QA, issue 44). The callback now prints
    the sdk's validation line, which both adapters read as a Validation the observer keeps."""
    [line] = sdk_lines("sdk.validation(8, 2.25)")
    assert line == "runbook: step 8 val_loss 2.250000"
    for adapter in (ScriptAdapter(), HFTrainerAdapter()):
        assert adapter.parse_line(line) == Validation(iter_num=8, val_loss=2.25)
    assert ScriptAdapter().parse_line("runbook: step 8 val_loss n/a") is None
    tracker = MetricTracker(ProgressMeaning(256))
    tracker.on_event(Progress(iter_num=8, step=8, loss=2.5, iter_time_ms=1.0, is_step=True), 1.0)
    tracker.on_event(ScriptAdapter().parse_line(line), 2.0)
    assert (tracker.val_loss, tracker.best_val_loss, tracker.best_val_step) == (2.25, 2.25, 8)


def test_only_folders_announced_directly_in_out_dir_count_as_runbooks_saves(tmp_path):
    layout = HFTrainerAdapter().layout
    log = "\n".join([f"runbook: saving {tmp_path}/checkpoint-4", f"runbook: saving {tmp_path}/final",
                     f"runbook: saving {tmp_path}/elsewhere/checkpoint-8", f"runbook: saving {tmp_path}/checkpoint-x",
                     "checkpoint-12 saved"]).encode()
    assert layout.announced_saves(log, tmp_path) == {"checkpoint-4", "final"}


def hf_checkpoint(folder, step: int) -> None:
    folder.mkdir(parents=True)
    save_file({"w": torch.arange(1000, dtype=torch.float32)}, str(folder / "model.safetensors"))
    torch.save({"state": {"exp_avg": torch.arange(10_000, dtype=torch.float32)}, "param_groups": []}, folder / "optimizer.pt")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def test_hf_checkpoints_are_judged_by_their_own_formats(tmp_path):
    layout = HFTrainerAdapter().layout
    for step in (4, 8, 12, 16):
        hf_checkpoint(tmp_path / f"checkpoint-{step}", step)
    (tmp_path / "checkpoint-last").mkdir()   # not a step: HF's name with no number is not one of its checkpoints
    found = list_checkpoints(tmp_path, layout)
    assert [c.step for c in found] == [4, 8, 12, 16] and all(verify_checkpoint(c).ok for c in found)
    model = tmp_path / "checkpoint-16" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:-100])
    assert "truncated" in verify_checkpoint(found[3]).reason and not layout.looks_whole(found[3].path)
    optimizer = tmp_path / "checkpoint-12" / "optimizer.pt"
    data = bytearray(optimizer.read_bytes())
    data[len(data) // 3] ^= 0xFF   # inside a member: its CRC fails
    optimizer.write_bytes(bytes(data))
    assert "optimizer.pt" in (verify_checkpoint(found[2]).reason or "")
    (tmp_path / "checkpoint-8" / "trainer_state.json").write_text('{"global_step": ')
    assert "trainer_state.json" in verify_checkpoint(found[1]).reason
    (tmp_path / "checkpoint-4" / "model.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    assert "header" in verify_checkpoint(found[0]).reason


def test_a_nonfinite_tensor_is_named(tmp_path):
    hf_checkpoint(tmp_path / "checkpoint-4", 4)
    save_file({"ok": torch.ones(3), "bad": torch.tensor([1.0, float("nan")])}, str(tmp_path / "checkpoint-4" / "model.safetensors"))
    [checkpoint] = list_checkpoints(tmp_path, HFTrainerAdapter().layout)
    assert HFTrainerAdapter().find_nonfinite(checkpoint, 5) == ["bad"]


def test_argv_templates_and_the_hf_flags_carry_the_run_configs_hyperparameters():
    values = {"python": "py", "out_dir": "/o", "resume": "/o/step-000004/state.pt", "micro_batch_size": 2,
              "batch_size": 8, "grad_accum": 4, "lr": "0.001", "max_steps": 24, "save_interval": 4, "seed": 1,
              "block_size": 32, "train_dir": "/d", "val_dir": "/v", "device": "cpu"}
    assert argv_of(["{python}", "t.py", "--mb={micro_batch_size}", "{{literal}}"], ["--resume", "{resume}"], values) == \
        ["py", "t.py", "--mb=2", "{literal}", "--resume", "/o/step-000004/state.pt"]
    assert argv_of(["{python}"], ["--resume", "{resume}"], {**values, "resume": ""}) == ["py"]   # no resume: no flag
    argv = hf_argv("train.py", values, [], None)
    pairs = dict(zip(argv[2::2], argv[3::2]))
    assert (pairs["--per_device_train_batch_size"], pairs["--gradient_accumulation_steps"], pairs["--learning_rate"]) == ("2", "4", "0.001")
    assert pairs["--logging_nan_inf_filter"] == "false" and "--resume_from_checkpoint" not in argv
    with pytest.raises(ValueError, match="unknown template field {mb}"):
        template.check("--micro={mb}")


def test_a_wrong_setting_is_a_config_error_with_file_and_line(tmp_path):
    project = make_project(tmp_path / "hf", TRAINERS["hf-trainer"])
    project.set(trainer={"args": ["--warmup_steps", "2"]})
    load_config(project.config)   # the script's own flags pass
    project.set(trainer={"args": ["--learning-rate=1"]})
    with pytest.raises(SourceError, match=r"run_config.yaml:\d+.*set by runbook from the run config"):
        load_config(project.config)
    script = make_project(tmp_path / "script", TRAINERS["script"])
    script.set(trainer={"command": ["{python}", "train.py", "--lr", "{learning_rate}"]})
    with pytest.raises(SourceError, match=r"run_config.yaml:\d+.*unknown template field \{learning_rate\}"):
        load_config(script.config)


def test_a_relaunch_forgets_the_dead_launchs_last_loss():
    """A trainer that printed loss nan and was stopped for it: until the relaunch prints a loss of its own,
    the nan playbook must not see that NaN again (it fired 4 more times in 5 s, each relaunch from scratch)."""
    tracker = MetricTracker(ProgressMeaning(256))
    tracker.on_event(Progress(iter_num=8, step=8, loss=float("nan"), iter_time_ms=1.0, is_step=True), 1.0)
    tracker.new_launch(ProgressMeaning(256))
    assert tracker.loss is None


def test_the_preflight_names_a_missing_script_or_command(tmp_path):
    hf = make_project(tmp_path / "hf", TRAINERS["hf-trainer"])
    assert HFTrainerAdapter().check_environment(load_config(hf.config)) == []
    hf.set(trainer={"script": "no-such-train.py"})
    [problem] = HFTrainerAdapter().check_environment(load_config(hf.config))
    assert "trainer.script" in problem and "no-such-train.py" in problem
    script = make_project(tmp_path / "script", TRAINERS["script"])
    assert ScriptAdapter().check_environment(load_config(script.config)) == []
    script.set(trainer={"command": ["no-such-python-here", "train.py"]})
    problem, no_script = ScriptAdapter().check_environment(load_config(script.config))   # no train.py there either
    assert "trainer.command[0]" in problem and "no-such-python-here" in problem and "trainer.command[1]" in no_script


def test_check_refuses_a_script_command_whose_script_does_not_exist_with_the_keys_file_and_line(tmp_path):
    """QA: `runbook check` said "ready to launch" for ["torchrun", "--nproc-per-node", "2", "trian.py"]."""
    from typer.testing import CliRunner

    from runbook.cli import app

    project = make_project(tmp_path, TRAINERS["script"])
    (tmp_path / "train.py").write_text("print('training')\n")
    project.set(trainer={"command": ["{python}", "train.py", "--out", "{out_dir}"]})
    assert ScriptAdapter().check_environment(load_config(project.config)) == []   # relative to the project folder
    project.set(trainer={"command": ["{python}", "-u", "trian.py", "--out", "{out_dir}"]})
    [problem] = ScriptAdapter().check_environment(load_config(project.config))
    assert re.match(rf"{re.escape(str(project.config))}:\d+:\d+: trainer.command\[2\] is 'trian.py': no file "
                    rf"{re.escape(str(tmp_path / 'trian.py'))}", problem), problem
    project.set(trainer={"command": ["torchrun", "--nproc-per-node", "2", "trian.py", "--out", "{out_dir}"]})
    problems = ScriptAdapter().check_environment(load_config(project.config))
    assert any(re.match(r".*run_config.yaml:\d+:\d+: trainer.command\[3\] is 'trian.py': no file", p) for p in problems), problems
    result = CliRunner().invoke(app, ["check", str(project.config)])
    assert result.exit_code == 3 and "ready to launch" not in result.output and "trian.py" in result.output, result.output


def hf_config_error(project, args: list[str]) -> str:
    project.set(trainer={"args": args})
    with pytest.raises(SourceError) as refused:
        load_config(project.config)
    assert re.search(r"run_config.yaml:\d+", str(refused.value)), refused.value
    return str(refused.value)


def test_an_abbreviated_flag_runbook_owns_is_refused_in_trainer_args(tmp_path):
    """QA: `--learning_rat 5e-4` passed `runbook check` and, after runbook's `--learning_rate`, set the lr: argparse
    takes an unambiguous prefix for the flag (allow_abbrev) and the last value wins. Proven on HF's own parser."""
    from transformers import HfArgumentParser, TrainingArguments

    values = {"python": "py", "out_dir": str(tmp_path / "o"), "micro_batch_size": 2, "grad_accum": 4, "lr": "0.001",
              "max_steps": 24, "save_interval": 4, "seed": 1, "device": "cpu"}
    argv = hf_argv(tmp_path / "train.py", values, ["--learning_rat", "5e-4", "--per_device_train", "8"], None)
    [parsed] = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(argv[2:])
    assert (parsed.learning_rate, parsed.per_device_train_batch_size) == (5e-4, 8)   # what runbook must refuse

    project = make_project(tmp_path / "hf", TRAINERS["hf-trainer"])
    assert "argparse reads it as --learning_rate" in hf_config_error(project, ["--learning_rat", "5e-4"])
    assert "--per_device_train_batch_size" in hf_config_error(project, ["--block_size", "32", "--per_device_train", "8"])
    assert "--output_dir" in hf_config_error(project, ["--output_d", "/elsewhere"])
    assert "--learning_rate" in hf_config_error(project, ["--learning-ra=1"])   # HF's dashed alias, `=` form
    project.set(trainer={"args": ["--warmup_steps", "2", "--save_on_each_node", "--lr_scheduler_type", "cosine"]})
    load_config(project.config)   # the script's and TrainingArguments' other flags pass


def test_save_only_model_is_refused_as_every_resume_would_reset_the_optimizer(tmp_path):
    project = make_project(tmp_path / "hf", TRAINERS["hf-trainer"])
    for args in (["--save_only_model", "true"], ["--save_only_model"], ["--save_only_model=True", "--seed_x", "1"],
                 ["--save_only_mod", "yes"]):
        assert "optimizer and the lr schedule" in hf_config_error(project, args), args
    project.set(trainer={"args": ["--save_only_model", "false"]})
    load_config(project.config)


def test_a_trainingarguments_json_file_as_the_first_argument_is_refused_with_what_to_do(tmp_path):
    """run_clm's `train.py args.json` (HfArgumentParser.parse_json_file) passed `runbook check`, then every launch
    failed: runbook's flags come after it, so the script never takes the file path."""
    project = make_project(tmp_path / "hf", TRAINERS["hf-trainer"])
    problem = hf_config_error(project, ["configs/args.json"])
    assert "TrainingArguments file" in problem and "as flags in trainer.args" in problem


def test_a_script_command_with_templates_after_its_launcher_is_launched(tmp_path):
    """The world size is read from the command's launcher flags before {out_dir}, {max_steps} ... are known:
    rendering the whole command then raised KeyError: 'out_dir' in every kind-script watcher."""
    project = make_project(tmp_path, TRAINERS["script"])
    project.set(trainer={"command": ["{python}", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py",
                                     "--out", "{out_dir}", "--steps", "{max_steps}", "--accum", "{grad_accum}"]})
    loaded = load_config(project.config)
    spec = ScriptAdapter().prepare_launch(loaded, tmp_path / "launch-1", None, "")
    assert spec.argv[-6:] == ["--out", str(loaded.out_dir), "--steps", "24", "--accum", "1"]   # batch 8 / (4 x 2 ranks)
