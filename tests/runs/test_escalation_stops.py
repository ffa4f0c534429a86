"""An escalation stops its trainer (issue 34): the escalated watcher exited 4 and left the diverged trainer
training on, unsupervised, to final/ (`status`: "escalated" beside "final/ written"). Now the escalating
watcher stops it (a notice save first where the trainer takes notices), and a rerun resumes with one
trainer, never two. Real `runbook watch` processes: the toy trainer, and one real litgpt run.
"""

from __future__ import annotations

import os
import subprocess
import textwrap

import psutil
import pytest

from engine.records.journal import Journal
from tests.conftest import REPO, RUNBOOK, stop_process
from tests.runs.test_toy_trainer import make_toy_project


# Transitional: these tests still run the real litgpt trainer (tests/conftest.py's `project` is the toy's).
@pytest.fixture
def project(litgpt_project):
    return litgpt_project


@pytest.fixture
def reference_run(litgpt_reference_run):
    return litgpt_reference_run


ESCALATE_AT_STEP = textwrap.dedent("""\
    name: escalate-early
    description: A test playbook that hands the run to a human while its trainer is training.
    severity: warning
    priority: 50
    match:
      expr: "state.metrics.step is not none and state.metrics.step >= STEP"
    limits: {max_attempts: 1}
    actions:
      - escalate: {reason: "a person must look at step {{ state.metrics.step }}"}
""")


def entries(project) -> list[dict]:
    return Journal(project.run_dir / "journal.jsonl").entries()


def escalate(project, step: int, env=None, timeout: float = 240) -> list[dict]:
    """Watch until the test playbook escalates at `step` (exit 4); the journal then."""
    (project.root / "playbooks").mkdir(exist_ok=True)
    (project.root / "playbooks" / "escalate_early.yaml").write_text(ESCALATE_AT_STEP.replace("STEP", str(step)))
    watcher = project.watch(env=env)
    try:
        assert watcher.wait(timeout=timeout) == 4, project.watch_output()
    finally:
        stop_process(watcher)
    (project.root / "playbooks" / "escalate_early.yaml").unlink()
    return entries(project)


def assert_stopped_by_the_escalation(project, journal: list[dict]) -> int:
    [launch] = [e for e in journal if e["kind"] == "launch"]
    pid = launch["pid"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).create_time() != launch["started"], \
        f"trainer pid {pid} still runs after the escalation"
    kinds = [e["kind"] for e in journal]
    stopped = kinds.index("trainer_stopped") if "trainer_stopped" in kinds else kinds.index("trainer_noticed")
    escalated = next(i for i, e in enumerate(journal) if e.get("to") == "escalated")
    assert stopped < escalated, kinds   # stopped by the escalating watcher, before it said "escalated"
    return pid


def test_an_escalation_stops_the_toy_trainer_and_the_rerun_resumes_with_one_trainer(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.3)   # 40 steps: 12 s to final/
    env = {"PYTHONPATH": str(REPO)}
    journal = escalate(project, 7, env=env, timeout=120)   # after the toy's first checkpoint (step 5)
    first = assert_stopped_by_the_escalation(project, journal)
    assert not (project.out_dir / "final").exists(), "the escalated trainer trained on to final/"
    status = subprocess.run([RUNBOOK, "status", str(project.config)], capture_output=True, text=True,
                            cwd=project.root, env={**os.environ, **env}, timeout=60)
    assert status.returncode == 4 and "final/ written" not in status.stdout, status.stdout
    [incident] = project.incidents()
    assert incident["outcome"] == "escalated" and any("trainer was stopped" in n for n in incident.get("notes", [])), incident
    rerun = project.watch(env=env)
    try:
        assert rerun.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(rerun)
    launches = [e for e in entries(project) if e["kind"] == "launch"]
    assert [e["pid"] for e in launches][0] == first and len(launches) == 2, launches
    assert launches[1]["resume_from"], "the rerun started from scratch instead of resuming"
    assert (project.out_dir / "final" / "state.json").is_file()


@pytest.mark.slow
def test_an_escalation_gives_the_real_litgpt_trainer_its_notice_save_and_stops_it(project, reference_run):
    journal = escalate(project, 3)
    assert_stopped_by_the_escalation(project, journal)
    assert not (project.out_dir / "final").exists(), "the escalated trainer trained on to final/"
    noticed = [e for e in journal if e["kind"] == "trainer_noticed"]
    assert noticed and "took the" in noticed[0]["detail"], noticed   # litgpt saved on its notice, then exited
    rerun = project.watch()
    try:
        assert rerun.wait(timeout=300) == 0, project.watch_output()
    finally:
        stop_process(rerun)
    launches = [e for e in entries(project) if e["kind"] == "launch"]
    assert len(launches) == 2 and launches[1]["resume_from"], launches
    project.assert_same_result_as(reference_run)   # the notice save resumed: counters and bit-identical weights
