"""The run config: validation with file:line, path resolution, write-back with comments, data hash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.config import compute_data_hash

from engine.trainers.run_config import load_config
from engine.core.yaml_source import SourceError
from tests.conftest import REPO, RUNBOOK


# Tests with `project` use the toy trainer's project (tests/conftest.py): runbook's own checks, no trainer's.
# Its watcher imports the toy's adapter from this repository (PYTHONPATH). The ones with `litgpt_project` check
# litgpt's side: its device check and its install check.
TOY_ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proj" / "configs" / "run_config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_shipped_config_is_valid_and_paths_resolve_against_the_project_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the current directory must not matter
    loaded = load_config(REPO / "configs" / "run_config.yaml")
    assert loaded.out_dir == REPO / "checkpoints" / "pretrain"
    assert loaded.run_log == REPO / "docs" / "run-log.md"
    assert loaded.config.batch_size % loaded.config.micro_batch_size == 0


def test_unknown_key_is_reported_with_file_line_and_key(tmp_path):
    path = write(tmp_path, "micro_batch_size: 4\nbatch_size: 16\nwatch:\n  poll_interval_s: 0.2\n  hang_timout_s: 5\n")
    with pytest.raises(SourceError) as err:
        load_config(path)
    assert f"{path}:5:3: watch.hang_timout_s: unknown key" in str(err.value)


def test_wrong_type_and_bad_yaml_are_reported_with_lines(tmp_path):
    path = write(tmp_path, "micro_batch_size: four\n")
    with pytest.raises(SourceError) as err:
        load_config(path)
    assert f"{path}:1:1: micro_batch_size:" in str(err.value)
    broken = tmp_path / "proj" / "configs" / "broken.yaml"
    broken.write_text("lr: 0.1\nmodel: [\n")
    with pytest.raises(SourceError) as err:
        load_config(broken)
    assert f"{broken}:3:" in str(err.value) and "invalid YAML" in str(err.value)


def test_batch_size_must_be_a_multiple_of_micro_batch(tmp_path):
    path = write(tmp_path, "micro_batch_size: 3\nbatch_size: 16\n")
    with pytest.raises(SourceError, match="multiple of micro_batch_size"):
        load_config(path)


def test_write_back_keeps_comments_and_order(tmp_path):
    path = write(tmp_path, (REPO / "configs" / "run_config.yaml").read_text())
    before = path.read_text()
    loaded = load_config(path).write_back({"lr": 0.0015, "micro_batch_size": 2})
    after = path.read_text()
    assert loaded.config.lr == 0.0015 and loaded.config.micro_batch_size == 2
    assert any(l.startswith("lr: 0.0015 ") and "# peak learning rate" in l for l in after.splitlines())
    assert [l.split(":")[0] for l in before.splitlines()] == [l.split(":")[0] for l in after.splitlines()]
    with pytest.raises(ValueError, match="must be a multiple of micro_batch_size"):
        load_config(path).write_back({"micro_batch_size": 3})  # invalid: refused, file unchanged
    assert path.read_text() == after


def test_launch_copy_is_the_config_in_use_even_after_the_file_was_edited(tmp_path):
    path = write(tmp_path, (REPO / "configs" / "run_config.yaml").read_text())
    loaded = load_config(path)
    loaded.save_copy(tmp_path / "same.yaml")
    assert (tmp_path / "same.yaml").read_text() == path.read_text()  # unchanged: the user's file, comments kept

    path.write_text(path.read_text().replace("lr: 0.003 ", "lr: 0.5 "))  # edited while the watcher runs
    loaded.save_copy(tmp_path / "used.yaml")
    copy = load_config(tmp_path / "used.yaml")
    assert copy.config == loaded.config and copy.config.lr == 0.003
    assert "was edited after runbook loaded it" in (tmp_path / "used.yaml").read_text()


@pytest.mark.slow
def test_bad_config_exits_3_with_file_line(tmp_path):
    path = write(tmp_path, "micro_batch_size: 4\nbatch_size: 16\nlr_typo: 1\n")
    result = subprocess.run([RUNBOOK, "watch", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert f"{path}:3:1: lr_typo: unknown key" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_data_folder_exits_3_with_one_sentence(project):
    project.set(data={"train_dir": "data/nowhere", "make_default": False})
    result = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True, timeout=60,
                            env=TOY_ENV)
    assert result.returncode == 3, result.stderr
    assert f"data.train_dir: folder {project.root / 'data' / 'nowhere'} does not exist" in result.stderr, result.stderr
    assert not list(project.root.rglob("trainer-*.log")), "a trainer was launched"
    assert "Traceback" not in result.stderr


def test_data_hash_is_written_when_empty_and_changed_data_refuses_to_resume(project):
    from runbook.watch_command import Refusal, prepare_data

    data = project.root / "data"   # the toy project's own data folders, private to this test
    loaded = load_config(project.config)
    assert loaded.config.data_hash == ""
    first = prepare_data(loaded, accept_data_change=False)
    assert first == compute_data_hash(data / "train", data / "val")
    assert first in project.config.read_text() and load_config(project.config).config.data_hash == first

    (data / "train" / "extra.txt").write_text("new text\n")
    # Changed data with nothing to resume from: the new hash is recorded, nothing refused.
    second = prepare_data(load_config(project.config), accept_data_change=False)
    assert second != first and load_config(project.config).config.data_hash == second

    # A checkpoint folder in the run's trainer's layout (the toy's ckpt-NNNNNN): there is something to resume from.
    project.step_dir(10).mkdir(parents=True)
    (data / "val" / "extra.txt").write_text("more new text\n")
    with pytest.raises(Refusal, match="training data changed"):
        prepare_data(load_config(project.config), accept_data_change=False)
    assert load_config(project.config).config.data_hash == second   # refused: the recorded hash is kept
    third = prepare_data(load_config(project.config), accept_data_change=True)
    assert third not in (first, second) and load_config(project.config).config.data_hash == third


@pytest.mark.slow
def test_a_wrong_config_path_is_one_sentence_and_exit_3(tmp_path):
    missing = tmp_path / "configs" / "nope.yaml"
    result = subprocess.run([RUNBOOK, "watch", str(missing)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert f"{missing}: file not found" in result.stderr and "Traceback" not in result.stderr


def test_a_cuda_config_on_a_cpu_machine_is_refused_with_the_fix(litgpt_project):
    """litgpt's preflight asks torch whether a CUDA GPU is visible (the toy refuses cuda by itself)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU, so a cuda config is valid here")
    litgpt_project.set(trainer={"device": "cuda"})
    result = subprocess.run([RUNBOOK, "watch", str(litgpt_project.config)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    assert "trainer.device is 'cuda'" in result.stderr and "set trainer.device: auto" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_lr_cut_below_min_lr_takes_the_schedule_floor_with_it(tmp_path):
    """litgpt's cosine decays from lr to min_lr: with lr < min_lr it would climb back up to min_lr."""
    from engine.trainers.litgpt.adapter import LitGPTAdapter

    path = write(tmp_path, (REPO / "configs" / "run_config.yaml").read_text())
    loaded = load_config(path)
    generated = LitGPTAdapter().trainer_config(loaded, tmp_path, tmp_path, None)
    assert generated["train"]["min_lr"] == loaded.config.trainer.min_lr == 0.0001  # untouched while lr is above it
    cut = loaded.write_back({"lr": 0.00002})
    generated = LitGPTAdapter().trainer_config(cut, tmp_path, tmp_path, None)
    assert generated["optimizer"]["init_args"]["lr"] == 0.00002 and generated["train"]["min_lr"] == 0.00002


def test_a_missing_trainer_exits_6_with_the_fix_and_launches_nothing(litgpt_project, tmp_path):
    """litgpt's own install check and its hint (the toy, a file of this repository, is always there)."""
    # sys.modules["litgpt"] = None is how Python spells "not importable": find_spec() answers None.
    hide = tmp_path / "hide-litgpt"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['litgpt'] = None\n")
    env = {**os.environ, "PYTHONPATH": str(hide)}
    result = subprocess.run([RUNBOOK, "watch", str(litgpt_project.config)], capture_output=True, text=True, timeout=120,
                            env=env, cwd=litgpt_project.root)
    assert result.returncode == 6, result.stdout + result.stderr
    assert "litgpt is not installed" in result.stderr and "scripts/setup.sh" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(litgpt_project.root.rglob("trainer-*.log")), "a trainer was launched"


@pytest.mark.slow
def test_device_auto_on_a_machine_without_gpu_device_nodes_does_not_import_torch():
    # torch costs the watcher ~2 s and ~200 MB for the whole run; it is only asked where a GPU may be.
    code = ("import sys; from engine.trainers.litgpt.launch import cuda_available; "
            "assert cuda_available(()) is False; assert 'torch' not in sys.modules; "
            "cuda_available(('/dev/null',)); assert 'torch' in sys.modules; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
