"""Crash at every point of a recovery: the watcher SIGKILLs itself at a named point of a shipped
playbook's incident (engine/core/crash_points.py: around each action, in the middle of journal appends,
between writing a record's temp file and renaming it, after the run-log append), a new watcher is
started, and for every point the same incident is finished exactly once: one record, valid and
complete, each planned action recorded once, opened/closed/reported once in the journal, one
run-log entry, the run config either the old or the new version (no temp left), and the run ends
with the same final state as an undisturbed run.

Runs on the toy trainer (tests/toy_trainer/: seconds per run), several points at a time.
`RUNBOOK_CRASH_ALL=1` exercises every point of every playbook here; CI runs every incident-level
point once (alternately with one of two playbooks) and every action point of one (the count is printed and
in docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engine.trainers.run_config import load_config
from engine.watch.faults import FAULTS, DrillRun, _signal_after_checkpoint
from engine.records.incident_store import IncidentStore
from engine.records.journal import Journal
from engine.language.loader import load_playbook_file
from engine.records.run_log import entry_marker
from tests.conftest import REPO, stop_process
from tests.runs.test_toy_trainer import STEPS, final_state, make_toy_project
from tests.toy_trainer import trainer as toy
from tests.toy_trainer.adapter import ToyAdapter

ALL = os.environ.get("RUNBOOK_CRASH_ALL") == "1"
WORKERS = 6   # each case is mostly waiting (toy steps, poll intervals): ~1 CPU s in 4 s of wall

# playbook -> (how the fault is made, extra run-config settings, a config key the playbook changes)
SCENARIOS = {
    "preemption": (FAULTS["preemption"].inject, {}, None),
    "killed": (_signal_after_checkpoint(signal.SIGKILL, 2), {}, None),
    "oom": (None, {"micro_batch_size": 8, "batch_size": 16, "trainer": {"extra": {"step_seconds": 0.03, "oom_above_micro_batch": 4}}},
            "micro_batch_size"),
}
INCIDENT_POINTS = ["incident-saved", "incident-opened", "journal-torn-incident_opened", "incident-closing",
                   "journal-torn-incident_closed", "incident-closed", "run-log-appended", "journal-torn-incident_reported",
                   "before-replace-incident-1.json#1", "before-replace-incident-1.json#3"]
ACTION_POINTS = ["before-action-{i}", "after-action-{i}", "saved-action-{i}", "journal-torn-action_done#{n}",
                 "journaled-action-{i}"]


def crash_points(playbook: str, with_actions: bool) -> list[str]:
    points = list(INCIDENT_POINTS)
    if with_actions:
        actions = load_playbook_file(REPO / "playbooks" / f"{playbook.replace('-', '_')}.yaml").actions
        for i in range(len(actions)):
            points += [p.format(i=i, n=i + 1) for p in ACTION_POINTS]
    if SCENARIOS[playbook][2]:
        points += ["journal-torn-config_changed", "before-replace-run_config.yaml"]
    return points


# The incident-level points are the incident runner's, whatever the playbook: CI meets each of them once,
# alternating down INCIDENT_POINTS between a signal playbook (preemption) and one that rewrites the run config
# (oom), so both playbooks meet opening and closing points (both playbooks at every point: 10 more cases, ~20
# CPU s, the same code path); `killed` repeats preemption's path with another signal. RUNBOOK_CRASH_ALL=1 runs
# every point of every playbook.
CI_SCENARIOS = ("preemption", "oom")


def cases() -> list[tuple[str, str]]:
    out = []
    for playbook in SCENARIOS if ALL else CI_SCENARIOS:
        points = crash_points(playbook, with_actions=ALL or playbook == "oom")
        if not ALL:
            mine = set(INCIDENT_POINTS[CI_SCENARIOS.index(playbook)::len(CI_SCENARIOS)])
            points = [p for p in points if p in mine or p not in INCIDENT_POINTS]
        out += [(playbook, point) for point in points]
    return out


def undisturbed_state(project) -> dict:
    """The final state of an undisturbed run of the project: the toy's own steps replayed from scratch (its
    math does not depend on micro_batch_size, which only decides its OOM), where a reference run cost two
    more watchers."""
    cfg = load_config(project.config).config
    state = toy.initial_state(cfg.seed)
    for _ in range(STEPS):
        toy.train_step(state, cfg.lr)
    return state


def crash_and_restart(root: Path, playbook: str, point: str) -> dict:
    inject, settings, key = SCENARIOS[playbook]
    project = make_toy_project(root / "project")
    if settings:
        project.set(**settings)
    before = getattr(load_config(project.config).config, key) if key else None
    undisturbed = undisturbed_state(project)   # from the config as it was before any incident changed it
    env = {"PYTHONPATH": str(REPO), "RUNBOOK_CRASH_AT": point}
    first = project.watch(env=env)
    try:
        if inject is not None:
            inject(DrillRun(project.out_dir, project.run_dir, first, ToyAdapter(), 60))
        crashed = first.wait(timeout=60)
    finally:
        stop_process(first)
    second = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        finished = second.wait(timeout=90)
    finally:
        stop_process(second)
    return {"project": project, "crashed": crashed, "finished": finished, "before": before, "key": key,
            "undisturbed": undisturbed}


def check_finished_exactly_once(result: dict, playbook: str, point: str) -> None:
    project = result["project"]
    where = f"{playbook} @ {point}"
    assert result["crashed"] == -signal.SIGKILL, f"{where}: the crash point was not reached ({result['crashed']})"
    assert result["finished"] == 0, f"{where}: the restarted watcher exited {result['finished']}\n{project.watch_output()[-3000:]}"
    incidents, problems = IncidentStore(project.run_dir).read_all()
    assert not problems, f"{where}: {problems}"
    assert [i.playbook for i in incidents] == [playbook], f"{where}: {[(i.id, i.playbook, i.outcome) for i in incidents]}"
    [incident] = incidents
    assert incident.outcome == "recovered", f"{where}: {incident.outcome} {incident.escalation_reason}"
    assert sorted(a.index for a in incident.actions) == list(range(len(incident.plan))), f"{where}: {incident.actions}"
    entries = Journal(project.run_dir / "journal.jsonl").entries()
    kinds = [(e["kind"], e.get("incident")) for e in entries]
    # the failed launch and the recovery's one: a watcher killed right after the resume step launched keeps that
    # launch when it restarts (engine/language/actions/resume.py), rather than stopping it and launching again
    launches = [e["launch"] for e in entries if e["kind"] == "launch"]
    assert launches == [1, 2], f"{where}: launches {launches}"
    for kind in ("incident_opened", "incident_closed", "incident_reported"):
        assert kinds.count((kind, incident.id)) == 1, f"{where}: {kind} x{kinds.count((kind, incident.id))}"
    run_log = project.run_log.read_text()
    assert run_log.count(entry_marker(incident.id)) == 1, f"{where}: run-log entries"
    assert not list(project.config.parent.glob("*.part")) and not list((project.run_dir / "incidents").glob("*.part"))
    if result["key"]:
        now = getattr(load_config(project.config).config, result["key"])
        assert now in (result["before"], result["before"] // 2, result["before"] // 4), f"{where}: {now}"
    assert final_state(project) == result["undisturbed"], f"{where}: final state differs"


def test_a_watcher_killed_at_any_point_of_a_recovery_finishes_that_incident_exactly_once(tmp_path):
    chosen = cases()

    def one(n_case):
        n, (playbook, point) = n_case
        try:
            result = crash_and_restart(tmp_path / f"case-{n:03d}", playbook, point)
            check_finished_exactly_once(result, playbook, point)
            return None
        except AssertionError as failure:
            return str(failure)

    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        failures = [f for f in pool.map(one, enumerate(chosen)) if f]
    print(f"\ncrash points exercised: {len(chosen)} ({', '.join(sorted(SCENARIOS))}), "
          f"{len(chosen) - len(failures)} finished exactly once, {time.monotonic() - started:.0f} s")
    (tmp_path / "crash-points.json").write_text(json.dumps({"points": len(chosen), "failures": failures}, indent=1))
    assert not failures, "\n".join(failures)
