"""`runbook init --from-hf SCRIPT` / `--from-script SCRIPT` write a whole run config for the script a user
already has, which loads and passes `runbook check` once its numbers are set (issue 44)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from engine.trainers.run_config import load_config
from tests.conftest import REPO, RUNBOOK
from tests.trainers.projects import corpus

pytestmark = pytest.mark.slow


def init(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, "init", str(project), *args], capture_output=True, text=True, cwd=project, timeout=120)


def small(project) -> None:
    """The numbers a user sets for a tiny CPU run, and the data folders."""
    for name in ("train", "val"):
        (project / "data" / name).mkdir(parents=True, exist_ok=True)
        (project / "data" / name / "corpus.txt").write_text(corpus())
    text = (project / "configs" / "run_config.yaml").read_text()
    for old, new in (("micro_batch_size: 4", "micro_batch_size: 2"), ("batch_size: 32", "batch_size: 4"),
                     ("block_size: 1024", "block_size: 32"), ("max_tokens: 1000000000", "max_tokens: 4096"),
                     ("device: auto", "device: cpu")):
        text = text.replace(old, new)
    (project / "configs" / "run_config.yaml").write_text(text)


@pytest.mark.parametrize("flag, example, kind", [("--from-hf", "hf_trainer", "hf-trainer"), ("--from-script", "script", "script")])
def test_init_writes_a_run_config_for_the_users_script_that_check_accepts(tmp_path, flag, example, kind):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "examples" / example / "train.py", project / "train.py")
    done = init(project, flag, str(project / "train.py"))
    assert done.returncode == 0, done.stderr
    loaded = load_config(project / "configs" / "run_config.yaml")
    assert loaded.config.trainer.kind == kind
    small(project)
    checked = subprocess.run([RUNBOOK, "check", "configs/run_config.yaml"], capture_output=True, text=True, cwd=project,
                             timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert checked.returncode == 0 and "ready to launch" in checked.stdout, checked.stdout + checked.stderr
    again = init(project, flag, str(project / "train.py"))
    assert again.returncode != 0 and "already exists" in again.stderr   # never over the user's config


def test_init_takes_exactly_one_source(tmp_path):
    done = init(tmp_path)
    assert done.returncode != 0 and "exactly one of" in done.stderr
