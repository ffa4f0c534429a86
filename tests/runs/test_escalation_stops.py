"""An escalation stops its trainer (issue 34): the escalated watcher exited 4 and left the diverged trainer
training on, unsupervised, to final/ (`status`: "escalated" beside "final/ written"). Now the escalating
watcher stops it (a notice save first where the trainer takes notices), and a rerun resumes with one
trainer, never two. Real `runbook watch` processes on the toy trainer, one that takes notices as litgpt
does under runbook (a save of the step in progress, exit 75) and one that does not (litgpt's own notice
save is proven by the litgpt contract suite, tests/litgpt/).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap

import psutil
import pytest

from engine.records.journal import Journal
from tests.conftest import REPO, RUNBOOK, stop_process

ENV = {"PYTHONPATH": str(REPO)}   # the watcher (and any command reading the config) imports tests.toy_trainer

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


# A trainer that takes notices is escalated before its first checkpoint (step 5): only its notice save lets
# the rerun resume. One that takes none is escalated after it, and is stopped unsaved (SIGTERM kills it).
@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
@pytest.mark.parametrize("notice_save,escalate_at", [(True, 3), (False, 7)], ids=["notice-save", "no-notice"])
def test_an_escalation_stops_the_trainer_and_the_rerun_resumes_with_one_trainer(project, reference_run, notice_save,
                                                                                 escalate_at):
    project.set(trainer={"extra": {"step_seconds": 0.2, "notice_save": notice_save}})   # 40 steps: 8 s to final/
    journal = escalate(project, escalate_at, env=ENV, timeout=120)
    first = assert_stopped_by_the_escalation(project, journal)
    assert not (project.out_dir / "final").exists(), "the escalated trainer trained on to final/"
    noticed = [e for e in journal if e["kind"] == "trainer_noticed"]
    first_log = sorted((project.run_dir / "logs").glob("trainer-*.log"))[0].read_text()
    steps = [s for s in (project.layout.step_of(p.name) for p in project.out_dir.iterdir()) if s is not None]
    newest = max((s for s in steps if project.saved(s)), default=0)
    if notice_save:   # it saved the step in progress on the notice and exited 75, before the escalation
        assert noticed and "took the SIGTERM notice and exited 75" in noticed[0]["detail"], noticed
        saved = re.findall(rf"toy: saved step (\d+) on notice signal {int(signal.SIGTERM)}, exiting 75", first_log)
        assert saved == [str(newest)] and newest >= escalate_at, (saved, steps, first_log[-500:])
    else:   # no notice to give: stopped with SIGTERM, its steps since its last checkpoint lost
        assert not noticed and "on notice signal" not in first_log, noticed
        assert any(e["kind"] == "trainer_stopped" and "stopped with SIGTERM" in e["detail"] for e in journal), journal
        assert newest % 5 == 0 and newest >= 5, steps
    status = subprocess.run([RUNBOOK, "status", str(project.config)], capture_output=True, text=True,
                            cwd=project.root, env={**os.environ, **ENV}, timeout=60)
    assert status.returncode == 4 and "final/ written" not in status.stdout, status.stdout + status.stderr
    [incident] = project.incidents()
    assert incident["outcome"] == "escalated" and any("trainer was stopped" in n for n in incident.get("notes", [])), incident

    rerun = project.watch(env=ENV)
    try:
        assert rerun.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(rerun)
    launches = [e for e in entries(project) if e["kind"] == "launch"]
    assert [e["pid"] for e in launches][0] == first and len(launches) == 2, launches   # one trainer at a time
    assert launches[1]["resume_from"] == str(project.layout.resume_file(project.step_dir(newest))), launches[1]
    assert project.incidents() == [incident]   # the rerun itself went undisturbed
    project.assert_same_result_as(reference_run)   # resumed from that save: counters and bit-identical state
