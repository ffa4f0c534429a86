"""engine/core/lock.py on real flocks, real files and real processes (benchmarks/bench_mutation.py's survivors):
one RunLock per run folder, released for the next one, the lock file holding exactly the holder's pid; who
holds a lock, told from the pid written and checked against /proc/locks; pid_running's edges."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time

import pytest

from engine.core.lock import Flock, RunLock, RunLocked, holder_text, lock_holders, pid_running
from engine.core.run_folder import RunFolder


@pytest.fixture
def sleeper():
    # every signal at its default (a runner started under nohup would pass SIGHUP on ignored)
    proc = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    yield proc.pid
    proc.kill()
    proc.wait()


def a_dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_second_watcher_of_the_same_run_folder_is_refused_and_named(tmp_path):
    run_dir = tmp_path / "runs" / "deep" / "r1"                # folders made as needed
    with RunLock(run_dir) as first:
        assert isinstance(first, RunLock)
        lock_file = RunFolder(run_dir).lock
        assert lock_file.read_text() == f"{os.getpid()}\n"
        with pytest.raises(RunLocked) as refused:
            RunLock(run_dir).acquire()
        assert f"another runbook watcher (pid {os.getpid()}) is supervising {run_dir}" in str(refused.value)
    with RunLock(run_dir):                                     # released: the next watcher takes it
        pass
    first.release()                                            # twice: nothing more to release
    first.release()


def test_the_lock_file_holds_only_the_new_holders_pid_and_gets_the_usual_mode(tmp_path):
    lock_file = RunFolder(tmp_path).lock
    old = os.umask(0o022)
    try:
        with RunLock(tmp_path):
            assert stat.S_IMODE(os.stat(lock_file).st_mode) == 0o644
        lock_file.write_text("123456789012345\nleft over\n")   # a longer file left by an earlier watcher
        with RunLock(tmp_path):
            assert lock_file.read_bytes() == f"{os.getpid()}\n".encode()
    finally:
        os.umask(old)


def test_the_flock_base_cannot_be_acquired_and_releases_nothing():
    base = Flock()
    with pytest.raises(NotImplementedError):
        base.acquire()
    base.release()


def test_pid_running_edges(sleeper):
    assert pid_running(os.getpid()) is True and pid_running(sleeper) is True and pid_running(1) is True
    time.sleep(0.2)                                            # time for a signal sent by mistake to act
    assert os.waitid(os.P_PID, sleeper, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None   # only asked (signal 0)
    assert pid_running(0) is False and pid_running(-1) is False   # never "every process" (kill(-1, 0))
    assert pid_running(a_dead_pid()) is False
    assert pid_running(2 ** 40) is False                       # too big to be a pid: not an error


def test_another_users_process_counts_as_running():
    """As another user, kill(pid, 0) on root's process is refused (EPERM): the process exists."""
    if os.geteuid() != 0:
        assert pid_running(1)
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(65534)
            os.setuid(65534)
            os._exit(0 if pid_running(1) is True else 1)
        except BaseException:   # noqa: BLE001 - the child reports by its status only
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def key_of(path) -> str:
    info = os.stat(path)
    return f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"


def test_lock_holders_reads_the_flock_holders_of_that_file_only(tmp_path):
    target = tmp_path / "watch.lock"
    target.write_text("")
    key = key_of(target)
    other = key.rsplit(":", 1)[0] + ":" + str(os.stat(target).st_ino + 1)
    locks = tmp_path / "locks"
    locks.write_text("\n".join([
        f"1: FLOCK  ADVISORY  WRITE 4242 {key} 0 EOF",           # a holder of this file
        f"2: POSIX  ADVISORY  WRITE 4343 {key} 0 EOF",           # an fcntl lock, not an flock
        f"3: FLOCK  ADVISORY  WRITE 4444 {other} 0 EOF",         # another file
        f"4: -> FLOCK  ADVISORY  WRITE 4545 {key} 0 EOF",        # a waiter, not a holder
        f"5: FLOCK  ADVISORY  WRITE x46 {key} 0 EOF",            # no pid
        "6: FLOCK",                                              # cut short
        f"7: FLOCK  ADVISORY  READ 4747 {key} 0 EOF",
        f"8: FLOCK  ADVISORY  WRITE 4848 {key}",                 # six fields: enough
    ]) + "\n")
    fd = os.open(target, os.O_RDONLY)
    try:
        assert lock_holders(fd, str(locks)) == {4242, 4747, 4848}
        assert lock_holders(fd, str(tmp_path / "no-locks-file")) is None
    finally:
        os.close(fd)
    assert lock_holders(fd, str(locks)) is None                 # a closed fd: cannot be known


def test_lock_holders_reads_at_most_one_mib(tmp_path):
    target = tmp_path / "watch.lock"
    target.write_text("")
    line = f"1: FLOCK  ADVISORY  WRITE 4242 {key_of(target)} 0 EOF\n"
    locks = tmp_path / "locks"
    locks.write_text("#" * ((1 << 20) - 10) + "\n" + line)
    fd = os.open(target, os.O_RDONLY)
    try:
        assert lock_holders(fd, str(locks)) == set()
    finally:
        os.close(fd)


def test_lock_holders_sees_a_real_flock(tmp_path):
    with RunLock(tmp_path) as held:
        assert held._fd is not None
        fd = os.open(held.path, os.O_RDONLY)
        try:
            assert os.getpid() in lock_holders(fd)
        finally:
            os.close(fd)


def text_for(tmp_path, written: str, hold: bool) -> str:
    """holder_text for a lock file holding `written`, held by this process (a RunLock) or by nobody."""
    path = RunFolder(tmp_path).lock
    if hold:
        with RunLock(tmp_path):
            path.write_text(written)
            fd = os.open(path, os.O_RDONLY)
            try:
                return holder_text(fd, path)
            finally:
                os.close(fd)
    path.write_text(written)
    fd = os.open(path, os.O_RDONLY)
    try:
        return holder_text(fd, path)
    finally:
        os.close(fd)


def test_the_holder_written_and_holding_is_named_plainly(tmp_path):
    assert text_for(tmp_path, f"{os.getpid()}\n", hold=True) == f"pid {os.getpid()}"


def test_a_running_pid_with_nobody_holding_the_lock_is_named(tmp_path, sleeper):
    assert text_for(tmp_path, f"{sleeper}\n", hold=False) == f"pid {sleeper}"


def test_a_running_pid_that_is_not_the_holder_is_stale(tmp_path, sleeper):
    me = os.getpid()
    assert text_for(tmp_path, f"{sleeper}\n", hold=True) == (
        f"watch.lock names pid {sleeper}, which is stale (not running or not the holder); /proc/locks says pid {me} holds it")


def test_a_dead_pid_is_stale(tmp_path):
    dead = a_dead_pid()
    assert text_for(tmp_path, f"{dead}\n", hold=False) == f"watch.lock names pid {dead}, which is stale (not running)"


@pytest.mark.parametrize("written", ["", "garbage\n", "1234567890\n", "-5\n"])
def test_a_lock_file_without_a_pid_says_so_and_who_holds_it(tmp_path, written):
    assert text_for(tmp_path, written, hold=False) == "pid unknown: watch.lock holds no pid"
    assert text_for(tmp_path, written, hold=True) == (
        f"pid unknown: watch.lock holds no pid; /proc/locks says pid {os.getpid()} holds it")


def test_a_nine_digit_pid_is_read(tmp_path):
    assert text_for(tmp_path, "999999998\n", hold=False) == "watch.lock names pid 999999998, which is stale (not running)"


def test_only_the_first_64_bytes_of_the_lock_file_are_read(tmp_path):
    text = text_for(tmp_path, " " * 62 + "12" + "3\n", hold=False)   # byte 65 is the "3"
    assert text.startswith(("watch.lock names pid 12,", "pid 12")) and text != "pid 123", text
