"""The trainer seam, proven by a second trainer: the pure-Python toy (tests/toy_trainer/) runs under a
real `runbook watch` subprocess, selected only by `trainer.kind` in the run config, and the shipped
playbooks recover it from a preemption and from a corrupt checkpoint + SIGKILL (engine/watch/faults.py's
drills) to the same final state as an undisturbed toy run. Each run takes a few seconds.
"""

from __future__ import annotations

import os
import signal

import pytest

from engine.core.config import TrainerSettings

from engine.trainers.run_config import load_config
from engine.trainers import UnknownTrainer, adapter_for, register_trainer
from engine.core.yaml_source import SourceError
from runbook.report import read_history
from tests.conftest import assert_recovered_in_the_end, TOY_KIND, TOY_STEPS, Project, make_toy_project, run_watch  # noqa: F401 (TOY_KIND: re-exported)
from tests.toy_trainer.adapter import ToyAdapter

STEPS, SAVE_INTERVAL = TOY_STEPS, 5          # max_tokens 40960 = 40 steps of 16 x 64 tokens
run_toy = run_watch   # the name the older toy tests use


def final_state(project: Project) -> dict:
    return project.final_state()


@pytest.fixture(scope="module")
def toy_reference(tmp_path_factory) -> dict:
    project = make_toy_project(tmp_path_factory.mktemp("toy-reference") / "project")
    seconds = run_toy(project)
    return {"project": project, "state": final_state(project), "seconds": seconds}


def test_an_undisturbed_toy_run_completes_sealed_and_reported(toy_reference):
    project = toy_reference["project"]
    assert toy_reference["state"]["step"] == STEPS
    assert toy_reference["seconds"] < 30, toy_reference["seconds"]
    assert project.incidents() == []
    folders = sorted(p.name for p in project.out_dir.glob("ckpt-*"))
    assert folders == [f"ckpt-{s:06d}" for s in range(SAVE_INTERVAL, STEPS + 1, SAVE_INTERVAL)]
    assert all((project.out_dir / f / "runbook-manifest.json").is_file() for f in folders)  # sealed by the engine
    assert os.readlink(project.out_dir / "last") == f"ckpt-{STEPS:06d}"
    history = read_history(load_config(project.config))   # the report reads the toy's log lines and layout
    assert history.final_exists and [c.step for c in history.checkpoints] == list(range(SAVE_INTERVAL, STEPS + 1, SAVE_INTERVAL))
    assert history.launches[0].steps == list(range(1, STEPS + 1))


def test_a_toy_trainer_that_takes_no_notice_dies_of_sigterm_and_resumes_to_the_undisturbed_final_state(tmp_path, toy_reference):
    project = make_toy_project(tmp_path / "project", notice_save=False)
    run_toy(project, fault="preemption")   # SIGTERM to run_dir/trainer.pid after the second checkpoint
    [incident] = project.incidents()
    assert incident["playbook"] == "preemption" and incident["outcome"] == "recovered"
    assert incident["trainer_exit_code"] == -signal.SIGTERM
    assert incident["resumed_step"] >= 2 * SAVE_INTERVAL and incident["resumed_step"] % SAVE_INTERVAL == 0
    journal = (project.run_dir / "journal.jsonl").read_text()
    assert f"ckpt-{incident['resumed_step']:06d}/state.json" in journal   # the relaunch resumed from the toy's file
    assert final_state(project) == toy_reference["state"]


def test_a_notice_to_the_toy_saves_the_step_in_progress_exits_75_and_loses_no_step(tmp_path, toy_reference):
    """The toy keeps litgpt's notice contract under runbook (engine/trainers/litgpt/notice_save.py): the step
    in progress is saved as its own checkpoint, off the save interval, and resumed with nothing lost."""
    project = make_toy_project(tmp_path / "project", step_seconds=0.1)
    run_toy(project, fault="preemption")
    [incident] = project.incidents()
    assert incident["playbook"] == "preemption" and incident["outcome"] == "recovered"
    assert incident["trainer_exit_code"] == 75
    assert incident["resumed_step"] == incident["step_at_failure"] and incident["steps_lost"] == 0, incident
    first_log = sorted((project.run_dir / "logs").glob("trainer-*.log"))[0].read_text()
    assert f"toy: saved step {incident['resumed_step']} on notice signal {int(signal.SIGTERM)}, exiting 75" in first_log
    assert final_state(project) == toy_reference["state"]


def test_a_truncated_toy_checkpoint_and_sigkill_are_recovered_from_an_older_one(tmp_path, toy_reference):
    project = make_toy_project(tmp_path / "project")
    run_toy(project, fault="corrupt-checkpoint")   # truncate the newest, flip a byte in the one before, SIGKILL
    incidents = project.incidents()
    assert_recovered_in_the_end(incidents)
    assert {i["playbook"] for i in incidents} <= {"corrupt-checkpoint", "killed"}
    quarantined = sorted(p.name.split("-2")[0] for p in (project.run_dir / "quarantine").iterdir())
    assert len(quarantined) >= 2, quarantined   # the truncated newest and the flipped one before it
    resumed = [i["resumed_step"] for i in incidents if i.get("resumed_step") is not None]   # a failed one resumed nothing
    assert resumed and max(resumed) < max(int(name.split("-")[1]) for name in quarantined)
    assert final_state(project) == toy_reference["state"]


def test_the_toy_trainers_pace_is_configurable(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.0)
    assert run_toy(project) < 20
    assert final_state(project)["step"] == STEPS


def test_an_unknown_trainer_kind_is_a_clear_config_error(tmp_path):
    project = make_toy_project(tmp_path / "project")
    project.set(trainer={"kind": "tensorflow"})
    with pytest.raises(SourceError, match="unknown trainer kind 'tensorflow': use one of .*litgpt"):
        load_config(project.config)
    project.set(trainer={"kind": "python:tests.toy_trainer.adapter:NoSuchAdapter"})
    with pytest.raises(SourceError, match="tests.toy_trainer.adapter has no NoSuchAdapter"):
        load_config(project.config)


def test_a_registered_trainer_name_is_accepted_like_a_python_path():
    with pytest.raises(UnknownTrainer):
        adapter_for("toy-registered")
    register_trainer("toy-registered", ToyAdapter)
    assert isinstance(adapter_for("toy-registered"), ToyAdapter)
    assert TrainerSettings(kind="toy-registered").kind == "toy-registered"


def test_an_unsealed_toy_checkpoint_is_judged_by_the_toy_layouts_own_checksum(tmp_path):
    from engine.checkpoints.manifest import seal_checkpoint, verify_checkpoint
    from engine.checkpoints.store import list_checkpoints
    from tests.toy_trainer import trainer

    layout = ToyAdapter().layout
    for step in (5, 10):
        trainer.save(tmp_path / layout.folder_name(step), {"step": step, "weights": [0.5] * trainer.SIZE})
    older, newest = list_checkpoints(tmp_path, layout)
    assert (older.step, newest.step) == (5, 10) and newest.resume_file.name == "state.json"
    assert seal_checkpoint(older).ok and verify_checkpoint(newest).ok
    data = newest.resume_file.read_bytes()
    newest.resume_file.write_bytes(data[: len(data) // 2])   # no manifest yet: only the layout can tell
    assert verify_checkpoint(newest).reason == "state.json does not match state.sha256 (corrupted)"
    (older.path / "state.sha256").unlink()
    assert verify_checkpoint(older).reason == "missing side file(s): state.sha256"
