"""engine/process/identity.py on real processes (issue 45): a pid is this run's trainer only when the journal's
start time (within START_TIME_TOLERANCE_S), the launcher's record (pid, kernel start ticks, boot id) and the
live process agree; whatever cannot be read or checked is "not proven", never a match. A ProvenProcess whose
pid was reused between the proof and the handle never sends a signal, whatever /proc says afterwards."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time

import psutil
import pytest

from engine.process import identity
from engine.process.identity import START_TIME_TOLERANCE_S, Identity, ProvenProcess, boot_id, start_ticks
from tests.conftest import require_capability


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def record_of(pid: int) -> dict:
    """What the launcher writes for its trainer (engine/process/launcher.py)."""
    return {"trainer_pid": pid, "trainer_start_ticks": start_ticks(pid), "boot_id": boot_id()}


def created(pid: int) -> float:
    return psutil.Process(pid).create_time()


def wait_zombie(pid: int) -> None:
    deadline = time.monotonic() + 5
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_tolerance_is_one_second():
    assert START_TIME_TOLERANCE_S == 1.0


def test_a_live_process_whose_records_agree_is_proven(sleeper):
    proof = Identity(sleeper.pid, created(sleeper.pid), record_of(sleeper.pid)).proof()
    assert proof.ours and proof.alive and proof.reason == f"pid {sleeper.pid}: start time and launcher record agree"


@pytest.mark.parametrize("offset", [0.9, -0.9, 1.0, -1.0])   # 1.0 exactly: still the same process
def test_a_start_time_within_the_tolerance_is_the_same_process(sleeper, offset):
    start = created(sleeper.pid)
    started = start + offset
    assert abs(start - started) <= START_TIME_TOLERANCE_S
    assert Identity(sleeper.pid, started, record_of(sleeper.pid)).proof().ours


@pytest.mark.parametrize("offset", [1.1, -1.1, 1.5, 30.0])
def test_a_start_time_off_by_more_than_the_tolerance_is_another_process(sleeper, offset):
    proof = Identity(sleeper.pid, created(sleeper.pid) + offset, record_of(sleeper.pid)).proof()
    assert not proof.ours and proof.alive and "another process now has that pid" in proof.reason


def test_kernel_start_ticks_that_differ_by_one_are_another_process(sleeper):
    record = {**record_of(sleeper.pid), "trainer_start_ticks": start_ticks(sleeper.pid) + 1}
    proof = Identity(sleeper.pid, created(sleeper.pid), record).proof()
    assert not proof.ours and proof.alive and "kernel start time differs" in proof.reason


def test_a_record_of_another_boot_is_not_proven(sleeper):
    record = {**record_of(sleeper.pid), "boot_id": "00000000-0000-0000-0000-000000000000"}
    proof = Identity(sleeper.pid, created(sleeper.pid), record).proof()
    assert not proof.ours and proof.alive and "before a reboot" in proof.reason


def test_an_older_launcher_record_without_ticks_or_boot_id_is_proven_by_the_start_time(sleeper):
    record = {"trainer_pid": sleeper.pid}
    assert Identity(sleeper.pid, created(sleeper.pid), record).proof().ours


def test_a_proc_stat_that_cannot_be_read_is_not_proven(sleeper, monkeypatch):
    """start_ticks is the module's /proc reader: when it reads nothing, recorded ticks prove nothing."""
    record = record_of(sleeper.pid)
    monkeypatch.setattr(identity, "start_ticks", lambda pid: None)
    proof = Identity(sleeper.pid, created(sleeper.pid), record).proof()
    assert not proof.ours and proof.alive


@pytest.mark.parametrize("pid", [None, "123", True, 1, 0, -4, 12.0, "self"])
def test_a_record_without_a_usable_pid_is_not_proven(pid):
    pid = os.getpid() if pid == "self" else pid
    proof = Identity(pid, time.time(), {"trainer_pid": pid}).proof()
    assert not proof.ours and not proof.alive and "names no usable pid" in proof.reason


@pytest.mark.parametrize("started", [None, "1700000000.0", True, math.nan, math.inf])
def test_a_launch_record_without_a_start_time_is_not_proven_but_the_process_is_alive(sleeper, started):
    proof = Identity(sleeper.pid, started, record_of(sleeper.pid)).proof()
    assert not proof.ours and proof.alive and "has no start time" in proof.reason


@pytest.mark.parametrize("record", [None, {}, "a record", "other pid"])
def test_a_missing_or_foreign_launcher_record_is_not_proven(sleeper, record):
    if record == "other pid":
        record = {**record_of(sleeper.pid), "trainer_pid": sleeper.pid + 1}
    proof = Identity(sleeper.pid, created(sleeper.pid), record).proof()
    assert not proof.ours and proof.alive
    assert ("names pid" in proof.reason) if isinstance(record, dict) and record else ("no launcher record" in proof.reason)


def test_pid_2_is_a_usable_pid_to_check():
    assert "has no start time" in Identity(2, None, None).proof().reason


def test_an_int_start_time_is_a_start_time(sleeper):
    assert Identity(sleeper.pid, round(created(sleeper.pid)), record_of(sleeper.pid)).proof().ours


def test_a_zombie_is_not_proven_and_not_alive(sleeper):
    record, started = record_of(sleeper.pid), created(sleeper.pid)
    sleeper.kill()
    wait_zombie(sleeper.pid)
    proof = Identity(sleeper.pid, started, record).proof()
    assert not proof.ours and not proof.alive and "zombie" in proof.reason
    assert not Identity(sleeper.pid, None, record).proof().alive


def test_a_gone_process_is_not_proven_and_not_alive(sleeper):
    record, started = record_of(sleeper.pid), created(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    proof = Identity(sleeper.pid, started, record).proof()
    assert not proof.ours and not proof.alive and "is gone" in proof.reason
    assert start_ticks(sleeper.pid) is None


def test_start_ticks_are_the_kernels_start_time(sleeper):
    ticks = start_ticks(sleeper.pid)
    boot = psutil.boot_time()
    assert abs(boot + ticks / os.sysconf("SC_CLK_TCK") - created(sleeper.pid)) < 0.05
    assert start_ticks(os.getpid()) < ticks                     # this process started before the sleep


def test_boot_id_is_this_boots():
    assert boot_id() == open("/proc/sys/kernel/random/boot_id").read().strip()


# --- ProvenProcess ------------------------------------------------------------------------------------


def test_a_proven_process_is_signalled(sleeper):
    handle = ProvenProcess.of(sleeper.pid)
    assert handle.ticks == start_ticks(sleeper.pid)
    assert handle.send(0) is True and handle.send(signal.SIGTERM) is True
    assert sleeper.wait(timeout=5) == -signal.SIGTERM
    assert handle.send(signal.SIGTERM) is False                # reaped: nothing to reach
    handle.close()
    handle.close()


def test_a_pid_reused_between_the_proof_and_the_handle_is_never_signalled(sleeper, monkeypatch):
    handle = ProvenProcess(sleeper.pid, start_ticks(sleeper.pid) + 1)   # the ticks the proof saw: another process's
    assert handle.ticks == -1 and handle._fd is None
    reads = []
    monkeypatch.setattr(identity, "start_ticks", lambda pid: reads.append(pid) or -1)   # whatever /proc says now
    assert handle.send(signal.SIGTERM) is False
    assert reads == []                                         # refused on its mark alone
    assert sleeper.poll() is None


def test_without_pidfds_the_start_time_is_checked_before_each_signal(sleeper, monkeypatch):
    monkeypatch.delattr(os, "pidfd_open")
    wrong = ProvenProcess(sleeper.pid, start_ticks(sleeper.pid) + 1)
    assert wrong._fd is None and wrong.send(signal.SIGTERM) is False and sleeper.poll() is None
    unknown = ProvenProcess(sleeper.pid, None)
    assert unknown.send(signal.SIGTERM) is False and sleeper.poll() is None
    right = ProvenProcess.of(sleeper.pid)
    assert right.send(signal.SIGTERM) is True and sleeper.wait(timeout=5) == -signal.SIGTERM
    assert right.send(signal.SIGTERM) is False                 # gone: its start time cannot be read


def test_a_handle_on_a_pid_that_is_gone_sends_nothing(sleeper):
    sleeper.kill()
    sleeper.wait()
    handle = ProvenProcess(sleeper.pid, None)
    assert handle._fd is None and handle.send(0) is False
    handle.close()


def test_with_a_pidfd_a_handle_without_recorded_ticks_signals_through_it(sleeper):
    handle = ProvenProcess(sleeper.pid, None)
    assert handle._fd is not None and handle.ticks is None
    assert handle.send(signal.SIGTERM) is True and sleeper.wait(timeout=5) == -signal.SIGTERM


def test_a_process_this_user_may_not_signal_is_not_signalled_and_no_error(sleeper):
    """As another user (nobody), root's sleep is proven but EPERM refuses the signal: False, through the
    pidfd and through the start-time fallback alike."""
    if os.geteuid() != 0:
        require_capability("root, to become another user")
    pid = os.fork()
    if pid == 0:
        try:
            handle = ProvenProcess.of(sleeper.pid)
            os.setgid(65534)
            os.setuid(65534)
            os._exit(0 if handle.send(signal.SIGTERM) is False else 1)
        except BaseException:   # noqa: BLE001 - the child reports by its status only
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and sleeper.poll() is None
