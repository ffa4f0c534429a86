"""A restart storm across classes escalates (issue 48 item 5): incidents of two kinds or more, one after another,
with the run never past the step where the first failed, trip no playbook's own limit; the incident that would be
the watch.restart_storm_incidents-th (5) escalates instead, naming the chain.

Pure: the chain and the verdict (engine/language/restart_storm.py), through the real matcher. Real: a toy trainer
that holds at step 3 of every launch (no checkpoint before it: each relaunch starts over), SIGKILLed and
SIGTERMed by turns from outside: killed, preemption, killed, preemption, and the fifth escalates."""

from __future__ import annotations

import os
import signal
import time

import pytest

from engine.core.config import RunConfig
from engine.language.matcher import AttemptHistory, MatchMemory, decide
from engine.language.playbook_set import load_set
from engine.language.playbook_testing import build_snapshots
from engine.language.restart_storm import chain_since_progress, restart_storm
from engine.records.journal import rebuild
from tests.conftest import REPO, make_toy_project, stop_process

SHIPPED = load_set([], True)[0]


def test_the_chain_is_every_recovery_since_the_earliest_step_the_run_has_not_got_past():
    steps = [("oom", 1.0, 10), ("hang", 2.0, 12), ("oom", 3.0, 12), ("killed", 4.0, 20)]
    assert chain_since_progress(tuple(steps), 20) == tuple(steps[3:])      # past 10 and 12 since: only the last
    rollback = [("nan", 1.0, 30), ("hang", 2.0, 12), ("oom", 3.0, 12), ("killed", 4.0, 20)]
    assert chain_since_progress(tuple(rollback), 20) == tuple(rollback)    # never past 30 (rolled back below it)
    assert chain_since_progress(tuple(rollback), 31) == ()                 # past every one of them
    assert chain_since_progress((("oom", 1.0, None), ("hang", 2.0, None)), None) == (("oom", 1.0, None), ("hang", 2.0, None))
    assert chain_since_progress((("oom", 1.0, None),), 0) == ()            # a first step is progress past none


def test_a_storm_needs_the_limit_and_two_kinds():
    four_kinds = (("oom", 1.0, 7), ("hang", 2.0, 7), ("collective-timeout", 3.0, 6), ("oom", 4.0, 7))
    storm = restart_storm(four_kinds, "hang", 7, 5)
    assert storm is not None and len(storm.chain) == 4
    reason = storm.reason(64.0)
    assert reason.startswith("restart storm: 5 incidents of 3 kinds in 1.1 min and the run never got past step 7:"), reason
    assert "collective-timeout at step 6" in reason and "and now hang at step 7" in reason, reason
    assert restart_storm(four_kinds, "hang", 7, 6) is None                 # one short of the limit
    assert restart_storm(four_kinds, "hang", 8, 5) is None                 # the run got past step 7
    one_kind = tuple(("oom", float(i), None) for i in range(5))
    assert restart_storm(one_kind, "oom", None, 5) is None                 # the OOM ladder: oom's own limit judges
    assert restart_storm(four_kinds, "hang", 7, 5, not_counted=frozenset({"oom"})) is None   # pruning-like ones


def test_the_matcher_escalates_the_fifth_incident_of_a_storm_and_the_journal_keeps_the_steps():
    entries = [{"kind": "incident_opened", "incident": f"incident-{i}", "playbook": name, "decision": "recover",
                "time": 100.0 + i, "snapshot": {"metrics": {"step": 3}}}
               for i, name in enumerate(["killed", "preemption", "killed", "preemption"], start=1)]
    history = rebuild(entries).history
    assert [(name, step) for name, _, step in history.recoveries] == [("killed", 3), ("preemption", 3)] * 2
    config = RunConfig()
    [snapshot] = build_snapshots([{"trainer": {"alive": False, "exit_code": -9}, "metrics": {"step": 3}}], config)
    decision = decide(snapshot, config, SHIPPED, MatchMemory(), history).decision
    assert decision is not None and decision.playbook.name == "killed" and decision.kind == "escalate", decision
    assert decision.reason.startswith("restart storm: 5 incidents of 2 kinds"), decision.reason
    fewer = rebuild(entries[:3]).history
    assert decide(snapshot, config, SHIPPED, MatchMemory(), fewer).decision.kind == "recover"


def newest_launch_reached(project, launch: int, step: int) -> bool:
    logs = sorted((project.run_dir / "logs").glob("trainer-*.log"), key=lambda p: p.stat().st_mtime)
    return len(logs) >= launch and f"toy step {step}/" in logs[-1].read_text(errors="replace")


@pytest.mark.slow
def test_a_run_killed_and_preempted_by_turns_at_the_same_step_escalates_at_the_fifth_incident(tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.02, notice_save=False, save_interval=100)
    project.set(trainer={"env": {"RUNBOOK_TOY_HOLD_AT_STEP": "3"}}, watch={"hang_timeout_s": 600})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        pids = []
        for launch, sig in enumerate([signal.SIGKILL, signal.SIGTERM] * 2 + [signal.SIGKILL], start=1):
            deadline = time.monotonic() + 60
            while not newest_launch_reached(project, launch, 3):
                assert watcher.poll() is None and time.monotonic() < deadline, project.watch_output()
                time.sleep(0.05)
            pid = int((project.run_dir / "trainer.pid").read_text())
            assert pid not in pids
            pids.append(pid)
            os.kill(pid, sig)
        assert watcher.wait(timeout=60) == 4, project.watch_output()   # escalated
    finally:
        stop_process(watcher)
    incidents = project.incidents()
    assert [(i["playbook"], i["outcome"]) for i in incidents] == [
        ("killed", "recovered"), ("preemption", "recovered"), ("killed", "recovered"), ("preemption", "recovered"),
        ("killed", "escalated")], [(i["playbook"], i["outcome"]) for i in incidents]
    last = incidents[-1]
    assert last["outcome"] == "escalated" and "restart storm: 5 incidents of 2 kinds" in str(last), last
    assert "restart storm" in (project.root / "docs" / "run-log.md").read_text()
