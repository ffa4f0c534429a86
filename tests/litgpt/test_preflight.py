"""The litgpt contract, before any launch: the preflight (`runbook check`, and `runbook watch` before any
launch) of a real litgpt project (litgpt's tokenizer rules, its own config parser, its version, its checkpoint
size): each failure kind one sentence naming the config key's file:line, exit 3; and a pass on the default
project. Nothing here trains: the checkpoint estimate reads the shared reference run's checkpoints."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from engine.trainers.litgpt.launch import cuda_available
from engine.trainers.litgpt.preflight import checkpoint_estimate, device_problems, tokenizer_problems
from runbook.exit_codes import ExitCode
from tests.conftest import RUNBOOK, can_mount_tmpfs, require_capability


def check(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, "check", str(project.config), *args], capture_output=True, text=True, timeout=300)


def line_of(config: Path, text: str) -> int:
    """1-based number of the first line of the config holding `text`."""
    return next(i for i, line in enumerate(config.read_text().splitlines(), 1) if text in line)


def own_tokenizer(project, shared_data: Path, **config) -> Path:
    """The project's tokenizer folder as a copy (not the shared link), with this tokenizer_config.json."""
    folder = project.root / "data" / "tokenizer"
    folder.unlink()
    shutil.copytree(shared_data / "tokenizer", folder)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_check_passes_on_the_default_project_in_seconds(litgpt_project):
    project = litgpt_project
    started = time.monotonic()
    done = check(project)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    shipped = len(list((Path(__file__).resolve().parents[2] / "playbooks").glob("*.yaml")))
    assert f"ready to launch ({shipped} playbook(s)" in done.stdout
    assert took < 60, f"runbook check took {took:.1f} s"   # ~5-8 s on 2 busy cores; litgpt's import is most of it


def test_each_problem_check_finds_is_one_sentence_at_its_config_line_in_one_run(litgpt_project, shared_data):
    """A tokenizer without bos, a CUDA device on a machine without a GPU and a key litgpt's own parser rejects:
    three problems of three kinds in one project, each reported by one `runbook check` as its own sentence
    naming its config key's file:line (one check, not three: each costs litgpt's parse, ~5 s of imports).
    Two devices on a CPU are no longer refused: runbook's entry runs them with DDP over gloo (tests/cluster/test_ranks.py)."""
    project = litgpt_project
    own_tokenizer(project, shared_data, eos_token="</s>", tokenizer_class="PreTrainedTokenizerFast")
    no_gpu = not cuda_available()   # on a machine with a GPU, cuda is no problem: the other two are still checked
    project.set(trainer={"extra": {"train": {"bogus_key": 3}}, **({"device": "cuda"} if no_gpu else {})})
    done = check(project)
    assert done.returncode == ExitCode.BAD_CONFIG, done.stdout + done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(problems) == 2 + no_gpu and f"{len(problems)} problem(s)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr

    def said_at(text: str, key: str) -> bool:
        where = f"{project.config}:{line_of(project.config, key)}:"
        return any(where in p and text in p for p in problems)

    assert said_at("has no bos token", "tokenizer_dir:"), problems
    assert said_at("litgpt pretrain refuses the generated config", "extra:") and "bogus_key" in done.stderr, problems
    if no_gpu:
        assert said_at("trainer.device is 'cuda' but this machine has no CUDA GPU", "device: cuda"), problems


def test_watch_refuses_the_same_before_any_launch(litgpt_project, shared_data):
    project = litgpt_project
    own_tokenizer(project, shared_data, bos_token="<s>")   # no tokenizer_class
    done = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True, timeout=300)
    assert done.returncode == ExitCode.BAD_CONFIG, done.stdout + done.stderr
    assert "has no tokenizer_class" in done.stderr
    assert not (project.run_dir / "launches").exists() and not project.out_dir.exists()


GOOD = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "tokenizer_class": "PreTrainedTokenizerFast"}


@pytest.mark.parametrize("config, said", [
    (GOOD, None),
    ({k: v for k, v in GOOD.items() if k != "bos_token"}, "has no bos token"),
    ({k: v for k, v in GOOD.items() if k != "tokenizer_class"}, "has no tokenizer_class"),
    ({**GOOD, "bos_token": "<nope>"}, "names bos_token '<nope>', which is not in"),
    ({**GOOD, "eos_token": {"content": "<end>"}}, "names eos_token '<end>', which is not in"),
], ids=["good", "no-bos", "no-class", "bos-unknown", "eos-unknown"])
def test_each_tokenizer_problem_is_one_litgpt_really_crashes_on(tmp_path, shared_data, config, said):
    # The check mirrors litgpt/tokenizer.py: what it refuses, litgpt's own Tokenizer fails on too
    # (loading, or encoding a file the way TextFiles does: bos=True), and what it accepts, litgpt takes.
    from litgpt.tokenizer import Tokenizer

    folder = tmp_path / "tokenizer"
    shutil.copytree(shared_data / "tokenizer", folder)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    problems = tokenizer_problems(folder, needs_bos=True, vocab_limit=512)
    try:
        Tokenizer(folder).encode("def f(): pass", bos=True)
        crashed = False
    except (KeyError, ValueError, NotImplementedError):
        crashed = True
    if said is None:
        assert problems == [] and not crashed
    else:
        assert len(problems) == 1 and said in problems[0] and crashed, problems


def test_a_tokenizer_larger_than_the_model_vocabulary_is_refused(shared_data):
    problems = tokenizer_problems(shared_data / "tokenizer", needs_bos=True, vocab_limit=256)
    assert problems == [f"the tokenizer in {shared_data / 'tokenizer'} has 512 tokens but the model's vocabulary "
                        "holds 256; set model.vocab_size to at least 512"]


def test_a_missing_and_an_empty_data_folder_are_refused_each_with_its_config_line(litgpt_project):
    project = litgpt_project
    empty = project.root / "data" / "val-own"
    empty.mkdir()
    (empty / "a.txt").write_text("")
    project.set(data={"train_dir": "data/train-missing", "val_dir": "data/val-own", "make_default": False})
    done = check(project)
    assert done.returncode == ExitCode.BAD_CONFIG, done.stdout + done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    for key, said in (("train_dir:", "does not exist"), ("val_dir:", "every .txt file in")):
        where = f"{project.config}:{line_of(project.config, key)}:"
        assert any(where in p and said in p for p in problems), (key, problems)
    assert len(problems) == 2 and "Traceback" not in done.stderr, done.stderr


def test_device_rules():
    assert device_problems(1, "cpu", 0) == [] and device_problems(4, "cuda", 4) == []
    assert device_problems(2, "cpu", 0) == []   # DDP over gloo (engine/trainers/litgpt/ranks.py)
    assert "torch sees 2 GPU(s)" in device_problems(4, "cuda", 2)[0]
    assert "no CUDA GPU" in device_problems(1, "cuda", 0)[0]


def test_an_out_dir_too_small_for_a_few_checkpoints_is_refused(litgpt_project):
    project = litgpt_project
    reason = can_mount_tmpfs(project.out_dir)
    if reason:
        require_capability(reason)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(project.out_dir)], check=True)
    try:
        done = check(project)
    finally:
        subprocess.run(["umount", "-l", str(project.out_dir)])
    assert done.returncode == ExitCode.BAD_CONFIG, done.stdout + done.stderr
    size, how = checkpoint_estimate(164_672, "32-true")   # the default model: 164,672 parameters
    assert "less than the" in done.stderr and how in done.stderr, done.stderr
    assert re.search(r"1,0\d\d\.\d KiB free", done.stderr) or "1.0 MiB free" in done.stderr, done.stderr


def test_the_checkpoint_estimate_is_within_a_few_percent_of_a_real_checkpoint(litgpt_reference_run):
    newest = sorted(litgpt_reference_run["project"].out_dir.glob("step-*"))[-1]
    real = (newest / "lit_model.pth").stat().st_size
    size, _ = checkpoint_estimate(164_672, "32-true")
    assert 0.95 < size / real <= 1.0, (size, real)


@pytest.mark.parametrize("command", ["check", "watch"])
def test_an_unsupported_litgpt_version_is_refused_in_one_sentence(litgpt_project, tmp_path, command):
    project = litgpt_project
    # A litgpt 0.4.0 distribution record ahead of the real one on the path: what importlib.metadata reports.
    fake = tmp_path / "site" / "litgpt-0.4.0.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: litgpt\nVersion: 0.4.0\n")
    done = subprocess.run([RUNBOOK, command, str(project.config)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    assert done.returncode == ExitCode.BAD_CONFIG, done.stdout + done.stderr
    assert "litgpt 0.4.0 is installed but runbook supports litgpt >=0.5.13,<0.6" in done.stderr
    assert not (project.run_dir / "launches").exists()


def test_watch_has_litgpt_parse_the_config_before_a_launch_unless_told_not_to(litgpt_project):
    """trainer.preflight_parse (default true; the other tests turn it off for speed) makes `watch` refuse
    a config litgpt's own parser rejects before any launch; off, the launch itself finds it."""
    project = litgpt_project
    project.set(trainer={"preflight_parse": True, "extra": {"train": {"bogus_key": 3}}})
    refused = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True, timeout=300)
    assert refused.returncode == ExitCode.BAD_CONFIG, refused.stdout + refused.stderr
    assert "litgpt pretrain refuses the generated config" in refused.stderr and "bogus_key" in refused.stderr
    assert not (project.run_dir / "trainer.pid").exists()   # nothing was launched
