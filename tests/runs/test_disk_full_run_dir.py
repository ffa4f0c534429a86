"""A full disk under run_dir and under the run log, not only under out_dir (issue 17 item 6).

Real tmpfs mounts (root only; skipped with the reason otherwise) filled by a filler file: the journal
holds what it cannot append in memory and appends it, in order, with no torn line, when space returns;
a real `runbook watch` with the toy trainer (tests/toy_trainer/) is preempted while both disks are full
and must not die, must warn once per kind of write, and must end with a complete record, a journal
without gaps or duplicates, one run-log entry and the undisturbed final state.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from engine.trainers.run_config import load_config
from engine.records.journal import Journal
from engine.core.write_trouble import WriteTrouble
from tests.conftest import REPO, RUNBOOK, fill, stop_process, wait_for
from tests.runs.test_toy_trainer import STEPS, make_toy_project
from tests.toy_trainer import trainer as toy


def test_the_journal_holds_entries_on_a_full_disk_and_appends_them_in_order_without_a_torn_line(tmpfs, tmp_path):
    folder = tmpfs(tmp_path / "run", "64k")
    warnings: list[str] = []
    journal = Journal(folder / "journal.jsonl", WriteTrouble(lambda event: warnings.append(event.text)))
    journal.append("transition", **{"from": "starting", "to": "running", "reason": "launch 1"})
    filler = fill(folder)
    for index in range(500):   # the file's last page has slack: appends land there until one does not fit
        size = journal.path.stat().st_size
        journal.append("action_done", incident="incident-1", index=index, ok=True)
        if journal.held:
            break
    assert journal.held == 1 and journal.path.stat().st_size == size   # a partial write was cut back
    journal.append("incident_closed", incident="incident-1", outcome="recovered")
    assert journal.held == 2 and len(warnings) == 1, warnings
    assert "could not write the journal (No space left on device)" in warnings[0]
    everything = journal.entries()   # this watcher's decisions see the held entries too
    assert [e["kind"] for e in everything[-2:]] == ["action_done", "incident_closed"]
    reader = Journal(journal.path)
    assert len(reader.entries()) == len(everything) - 2 and reader.problems == []
    assert journal.flush() == 2   # still full: kept, and not said again
    assert len(warnings) == 1

    filler.unlink()
    assert journal.flush() == 0
    on_disk = Journal(journal.path).entries()
    assert on_disk == everything and journal.path.read_bytes().endswith(b"\n")
    assert [e["index"] for e in on_disk if e["kind"] == "action_done"] == list(range(index + 1))
    assert warnings[-1] == "the journal written again: appended the 2 entries held in memory"


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_a_preemption_while_run_dir_and_the_run_log_are_full_is_recorded_completely_once_space_returns(tmpfs, tmp_path):
    project = make_toy_project(tmp_path / "project", step_seconds=0.1, notice_save=False)   # dies of the SIGTERM
    project.set(upkeep={"heartbeat_interval_s": 0.5})   # heartbeats fall while the disk is full: one warning
    run_dir = tmpfs(project.run_dir, "2m")
    docs = tmpfs(project.run_log.parent, "64k")
    env = {"PYTHONPATH": str(REPO)}   # the watcher imports tests.toy_trainer
    watcher = project.watch(env=env)
    try:
        wait_for(lambda: (project.out_dir / "ckpt-000010" / "state.sha256").exists(), 30, what="second checkpoint")
        pid = project.trainer_pid()
        os.kill(pid, signal.SIGSTOP)   # no log line while the disks fill, and a quiet moment for heartbeats
        fillers = [fill(run_dir), fill(docs)]
        wait_for(lambda: "could not write the heartbeat" in project.watch_output(), 30, what="a heartbeat to fail")
        time.sleep(1.2)   # more heartbeats fail: still one warning
        status = subprocess.run([RUNBOOK, "status", str(project.config)], cwd=project.root, capture_output=True,
                                text=True, env={**os.environ, **env}, timeout=60)
        os.kill(pid, signal.SIGTERM)   # the preemption, on full disks
        os.kill(pid, signal.SIGCONT)
        wait_for(lambda: "waiting up to 60 s for space" in project.watch_output(), 30, what="the relaunch to wait")
        assert watcher.poll() is None, project.watch_output()
        fillers.pop(0).unlink()   # run_dir gets space; the run log's disk stays full until its entry is held
        wait_for(lambda: "could not write the run log" in project.watch_output(), 30, what="the run log to fail")
        fillers.pop(0).unlink()
        assert watcher.wait(timeout=60) == 0, project.watch_output()
    finally:
        stop_process(watcher)

    output = project.watch_output()
    assert "Traceback" not in output and "the watcher failed" not in output, output
    assert "journal   the run folder's disk is full" in status.stdout, status.stdout + status.stderr
    for kind in ("incident records", "the heartbeat", "launch copies", f"the run log {project.run_log}"):
        assert output.count(f"could not write {kind} (No space left on device)") == 1, (kind, output)  # not a flood
        assert f"{kind} written again" in output or kind == "launch copies", (kind, output)
    # The journal's lines may all land in the slack of its file's last page (a 4 KiB page is allocated
    # whole), so only then is nothing held; test_the_journal_holds_entries_... always fills that slack.
    assert output.count("could not write the journal (No space left on device)") == output.count("the journal written again") <= 1

    [incident] = project.incidents()   # complete, valid JSON
    assert incident["playbook"] == "preemption" and incident["outcome"] == "recovered", incident
    assert incident["trainer_exit_code"] == -signal.SIGTERM   # learnt from the launcher's exit code
    assert [a["verb"] for a in incident["actions"]] == ["verify_checkpoints", "resume", "record", "advise_save_interval"]
    assert all(a["ok"] for a in incident["actions"]) and incident.get("first_progress_at") is not None

    journal = Journal(project.run_dir / "journal.jsonl")
    entries = journal.entries()
    assert journal.problems == [] and (project.run_dir / "journal.jsonl").read_bytes().endswith(b"\n")
    mine = [(e["kind"], e.get("index")) for e in entries if e.get("incident") == incident["id"]
            and e["kind"] in ("incident_opened", "action_done", "incident_closed")]
    assert mine == [("incident_opened", None), *(("action_done", i) for i in range(4)), ("incident_closed", None)]
    assert [e["to"] for e in entries if e["kind"] == "transition"][-1] == "completed"

    run_log = project.run_log.read_text()
    assert run_log.count(f"### {incident['id']} ") == 1, run_log

    cfg = load_config(project.config).config
    state = toy.initial_state(cfg.seed)   # the undisturbed run: the toy's own steps, from scratch
    for _ in range(STEPS):
        toy.train_step(state, cfg.lr)
    assert json.loads((project.out_dir / "final" / "state.json").read_text()) == state
