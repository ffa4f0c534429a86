"""`runbook drill` for the script and hf-trainer kinds of a project that names its script relative to itself, as
the shipped examples are used (examples/script/train.py, examples/hf_trainer/train.py copied in as train.py):
the scratch copy runs in another folder, so it must name the user's script absolutely; and a drill whose
watcher dies stops at once and says so (the slow drill waited out 300 s)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from engine.core.yaml_source import round_trip_yaml
from engine.trainers import adapter_for
from engine.trainers.run_config import load_config
from engine.watch.faults import FAULTS, DrillRun
from runbook.commands.drill_cmd import make_scratch_project
from runbook.exit_codes import ExitCode
from tests.conftest import REPO, RUNBOOK
from tests.trainers.projects import TRAINERS, make_project

COMMAND = ["{python}", "train.py", "--out", "{out_dir}", "--train-dir", "{train_dir}", "--steps", "{max_steps}",
           "--save-interval", "{save_interval}", "--micro-batch", "{micro_batch_size}", "--batch", "{batch_size}",
           "--lr", "{lr}", "--seed", "{seed}", "--block", "{block_size}"]
RELATIVE = {   # kind -> (the example, the trainer: section naming it relative to the project)
    "script": ("script", {"command": COMMAND}),
    "hf-trainer": ("hf_trainer", {"script": "train.py"}),
    "hf-trainer (script left at its default)": ("hf_trainer", {}),
}


def example_project(root, kind: str):
    example, trainer = RELATIVE[kind]
    project = make_project(root, TRAINERS[kind.split(" ")[0]])
    shutil.copy(REPO / "examples" / example / "train.py", root / "train.py")
    if trainer:
        project.set(trainer=trainer)
    if kind.endswith("default)"):
        yaml = round_trip_yaml()
        tree = yaml.load(project.config.read_text())
        del tree["trainer"]["script"]
        with open(project.config, "w") as fh:
            yaml.dump(tree, fh)
        assert load_config(project.config).config.trainer.script.as_posix() == "train.py"
    return project


@pytest.mark.parametrize("kind", RELATIVE)
def test_a_drills_scratch_copy_names_the_projects_relative_script_absolutely(tmp_path, kind):
    project = example_project(tmp_path / "project", kind)
    loaded = load_config(project.config)
    adapter = adapter_for(loaded.config.trainer.kind)
    assert adapter.check_environment(loaded) == []
    scratch = load_config(make_scratch_project(loaded, FAULTS["preemption"], tmp_path / "drill"))
    assert scratch.project_dir == tmp_path / "drill" and not (tmp_path / "drill" / "train.py").exists()
    assert adapter.check_environment(scratch) == []   # the preflight the scratch watcher runs first
    argv = adapter.prepare_launch(scratch, tmp_path / "launch", None, "").argv
    assert str(tmp_path / "project" / "train.py") in argv and "train.py" not in argv
    assert str(scratch.out_dir) in " ".join(argv)   # the scratch run's own folder, not the project's


@pytest.mark.slow   # a real watcher (tests/conftest.py: the fast tier starts none)
def test_a_slow_drill_whose_watcher_dies_stops_at_once_and_says_so(tmp_path):
    """The slow fault waits for 60 progress lines; a watcher that exits (here it escalates a trainer that fails
    at once, exit 4) must end the wait, not the drill's timeout."""
    project = make_project(tmp_path, TRAINERS["script"])
    project.set(trainer={"command": ["{python}", "-c", "import sys; sys.exit('no training today')"]})
    done = subprocess.run([RUNBOOK, "drill", "slow", str(project.config), "--timeout", "60"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert done.returncode == ExitCode.ESCALATED, done.stdout + done.stderr
    assert "drill failed: the watcher exited (4) after 0 of the 60 progress lines" in done.stdout, done.stdout
    assert "the watcher's last line: " in done.stdout and "Traceback" not in done.stdout + done.stderr


def test_the_wait_for_progress_ends_when_the_watcher_has_exited(tmp_path):
    (tmp_path / "logs").mkdir()
    watcher = subprocess.Popen([sys.executable, "-c", "raise SystemExit(5)"])
    watcher.wait()
    run = DrillRun(tmp_path / "out", tmp_path, watcher, adapter_for("script"), timeout=5)
    with pytest.raises(RuntimeError, match=r"the watcher exited \(5\) after 0 of the 60 progress lines"):
        FAULTS["slow"].inject(run)


@pytest.mark.slow   # a real watch of the example
@pytest.mark.parametrize("kind", ["script", "hf-trainer"])
def test_a_preemption_drill_of_an_example_named_relative_recovers(tmp_path, kind):
    """The whole drill on the example copied in as train.py: the scratch watcher finds it and the preemption is
    recovered (it failed before: the scratch project had no train.py)."""
    project = example_project(tmp_path / "project", kind)
    before = project.config.read_text()
    done = subprocess.run([RUNBOOK, "drill", "preemption", str(project.config), "--timeout", "400"], capture_output=True,
                          text=True, timeout=480, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recovered: True" in done.stdout and "completed: True" in done.stdout, done.stdout
    assert project.config.read_text() == before and not project.out_dir.exists()   # the run itself untouched
