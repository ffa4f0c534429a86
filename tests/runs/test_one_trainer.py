"""One trainer per run folder, and signals only to a process proven to be this run's.

Real runs, real processes (the toy trainer, tests/conftest.py's `project`): a trainer whose watcher died
is taken back by the next `runbook watch` (never a second trainer into the same out_dir); a live trainer
the journal cannot prove stops `watch` with exit 15; and an unrelated process behind every kind of stale
or forged record is neither watched nor signalled, by `watch`, `watch --dry-run` or `status`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from engine.records.journal import Journal
from engine.core.run_folder import RunFolder
from tests.conftest import HELD_TRAINERS, REPO, RUNBOOK, TOY_STEPS, stop_process, wait_for

pytestmark = pytest.mark.slow
ENV = {"PYTHONPATH": str(REPO)}   # the watcher (and any command reading the config) imports tests.toy_trainer


def runbook(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **ENV})


def pace(project, step_seconds: float) -> None:
    """The toy's pace (only its speed: the run's result does not depend on it)."""
    project.set(trainer={"extra": {"step_seconds": step_seconds, "notice_save": True}})

def journal_entries(project) -> list[dict]:
    return Journal(project.run_dir / "journal.jsonl").entries()


def launches(project) -> list[dict]:
    return [e for e in journal_entries(project) if e["kind"] == "launch"]


def leave_the_trainer_alive_unsupervised(project) -> int:
    """Run until its first sealed checkpoint, hold the trainer (SIGSTOP) so it is still mid-run when the next watcher starts,
    kill its watcher (SIGKILL: a crash) and return the trainer's pid. (An escalation no longer leaves its
    trainer running: tests/runs/test_escalation_stops.py.) Paced so that the 35 steps after the first
    checkpoint outlast the wait for it to be verified."""
    pace(project, 0.2)
    watcher = project.watch(env=ENV)
    try:
        wait_for(lambda: any(e.get("kind") == "verified" for e in journal_entries(project))
                 and bool(launches(project)), 120, interval=0.05, what="a sealed checkpoint")
        pid = launches(project)[-1]["pid"]
        HELD_TRAINERS.append(psutil.Process(pid))
        os.kill(pid, signal.SIGSTOP)
        assert not (project.out_dir / "final").exists(), "the toy finished first: slow its pace"
        watcher.kill()
        watcher.wait(timeout=60)
    finally:
        stop_process(watcher)
    assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
    return pid


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_a_rerun_after_the_watcher_died_reattaches_to_the_live_trainer(project, reference_run):
    pid = leave_the_trainer_alive_unsupervised(project)
    status = runbook("status", str(project.config))
    assert "alive, UNSUPERVISED" in status.stdout, status.stdout + status.stderr
    watcher = project.watch(env=ENV)
    try:
        wait_for(lambda: any("re-attached to trainer pid" in e.get("reason", "") for e in journal_entries(project)),
                 60, what="re-attach")
        os.kill(pid, signal.SIGCONT)
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    assert [e["pid"] for e in launches(project)] == [pid], "a second trainer was launched"
    assert project.incidents() == []
    project.assert_same_result_as(reference_run)   # counters and bit-identical weights


def test_a_live_trainer_the_journal_cannot_prove_stops_watch_with_exit_15(project):
    """The journal lost the start time (an older format, a hand edit): the trainer cannot be proven
    ours, so it is not signalled, and it is found through its launcher so nothing launches beside it."""
    pid = leave_the_trainer_alive_unsupervised(project)
    path = project.run_dir / "journal.jsonl"
    kept = [line for line in path.read_text().splitlines() if '"kind": "launch"' not in line]
    entry = {k: v for k, v in launches(project)[-1].items() if k not in ("started", "crc32")}
    path.write_text("\n".join(kept + [json.dumps(entry)]) + "\n")   # checksum-free: the older format
    try:
        result = runbook("watch", str(project.config))
        assert result.returncode == 15, result.stdout + result.stderr
        assert f"already running (pid {pid}" in result.stderr and "will not start a second one" in result.stderr
        assert len(launches(project)) == 1
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED   # untouched: no SIGCONT, no SIGKILL
    finally:
        os.kill(pid, signal.SIGKILL)


SIGNAL_RECORDER = textwrap.dedent("""\
    import signal, sys, time
    out = open(sys.argv[1], "a", buffering=1)
    for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda n, f: out.write(signal.Signals(n).name + "\\n"))
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
""")


@pytest.fixture
def bystander(tmp_path):
    """An unrelated long-running process that writes down every catchable signal it receives."""
    received = tmp_path / "received.txt"
    proc = subprocess.Popen([sys.executable, "-c", SIGNAL_RECORDER, str(received)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc, received
    proc.kill()
    proc.wait()


def forge(project, pid: int, how: str) -> None:
    """A run folder whose journal says a trainer is running under the bystander's pid."""
    folder = RunFolder(project.run_dir)
    journal = Journal(folder.journal)
    started = psutil.Process(pid).create_time()
    fields = {"launch": 1, "pid": pid, "log": str(folder.trainer_log(1)), "exit_status": str(folder.exit_status(1))}
    record = {"trainer_pid": pid, "launcher_pid": 1}
    if how == "no start time":
        pass
    elif how == "an hour off":
        fields["started"] = started - 3600
    elif how == "no launcher record":
        fields["started"], record = started, None
    elif how == "launcher names another pid":
        fields["started"], record = started, {"trainer_pid": pid + 1}
    elif how == "wrong kernel start ticks":
        fields["started"], record = started, {**record, "trainer_start_ticks": 1}
    elif how == "another boot":
        fields["started"], record = started, {**record, "boot_id": "00000000-0000-0000-0000-000000000000"}
    journal.append("transition", **{"from": "starting", "to": "running", "reason": "launched"})
    if how == "no start time":   # the older, checksum-free line
        folder.journal.open("a").write(json.dumps({"time": time.time(), "kind": "launch", **fields}) + "\n")
    else:
        journal.append("launch", **fields)
    folder.trainer_log(1).parent.mkdir(parents=True, exist_ok=True)
    folder.trainer_log(1).write_text("")
    if record is not None:
        folder.exit_status(1).parent.mkdir(parents=True, exist_ok=True)
        folder.exit_status(1).write_text(json.dumps(record))


FORGERIES = ["no start time", "an hour off", "no launcher record", "launcher names another pid",
             "wrong kernel start ticks", "another boot"]


@pytest.mark.parametrize("how", FORGERIES)
def test_dry_run_and_status_never_take_an_unrelated_process_for_the_trainer(project, bystander, how):
    proc, received = bystander
    forge(project, proc.pid, how)
    result = runbook("watch", str(project.config), "--dry-run")
    assert f"watching trainer pid {proc.pid}" not in result.stdout + result.stderr
    status = json.loads(runbook("status", str(project.config), "--json").stdout)
    assert status["trainer"]["alive"] is False and status["trainer"]["pid_taken_by_another_process"] is True
    assert proc.poll() is None and not (received.exists() and received.read_text())


@pytest.mark.parametrize("how", ["no start time", "wrong kernel start ticks"])
def test_watch_never_signals_an_unrelated_process_behind_a_forged_record(project, bystander, how):
    """The reproduction: an unrelated process was "re-attached", hang-stopped and SIGKILLed. Now it is
    left alone and the run trains with its own trainer to the end."""
    proc, received = bystander
    forge(project, proc.pid, how)
    watcher = project.watch(env=ENV)
    try:
        assert watcher.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(watcher)
    assert f"re-attached to trainer pid {proc.pid}" not in project.watch_output()
    assert proc.poll() is None and psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED
    assert not (received.exists() and received.read_text()), received.read_text()
    assert all(e["pid"] != proc.pid for e in launches(project)[1:])


@pytest.mark.waits   # mostly waits on real timeouts: runs on the waiting worker (tests/waiting_worker.py)
def test_a_launch_the_journal_never_recorded_is_taken_back_not_doubled(project, reference_run):
    """The watcher is SIGKILLed right after it started the trainer, before the journal's launch line
    (crash point `trainer-launched`): `status` still finds the live trainer through its launcher's
    record, and the next `runbook watch` re-attaches to it (journaling the launch as adopted) instead of
    refusing to start or launching a second trainer."""
    pace(project, 0.3)   # 40 steps: 12 s, for `status` and the next watcher to start while it trains
    first = project.watch(env={**ENV, "RUNBOOK_CRASH_AT": "trainer-launched"})
    assert first.wait(timeout=120) == -signal.SIGKILL, project.watch_output()
    status_path = RunFolder(project.run_dir).exit_status(1)
    wait_for(status_path.exists, 30, what="the launcher's record")
    trainer_pid = json.loads(status_path.read_text())["trainer_pid"]
    assert psutil.pid_exists(trainer_pid)
    assert Journal(RunFolder(project.run_dir).journal).replay().launches == 0   # the journal never heard of it

    shown = runbook("status", "-c", str(project.config), timeout=60)
    assert "UNSUPERVISED" in shown.stdout and str(trainer_pid) in shown.stdout, shown.stdout + shown.stderr
    assert not RunFolder(project.run_dir).journal.exists()   # a read-only command wrote nothing

    second = project.watch(env=ENV)
    try:
        assert second.wait(timeout=120) == 0, project.watch_output()
    finally:
        stop_process(second)
    replayed = Journal(RunFolder(project.run_dir).journal).replay()
    assert replayed.launches == 1 and replayed.trainer_pid == trainer_pid       # the same trainer, taken back
    launches = [e for e in map(json.loads, RunFolder(project.run_dir).journal.read_text().splitlines())
                if e.get("kind") == "launch"]
    assert [(e["pid"], e.get("adopted")) for e in launches] == [(trainer_pid, True)]
    assert sorted(p.name for p in RunFolder(project.run_dir).launches.iterdir()) == ["launch-001"]   # never a second
    assert "which the journal had not recorded" in project.watch_output()
    assert project.final_state()["step"] == TOY_STEPS and project.incidents() == []
    project.assert_same_result_as(reference_run)   # the one trainer trained the whole run, undisturbed
