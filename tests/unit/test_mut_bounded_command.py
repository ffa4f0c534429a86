"""engine/core/bounded_command.py on real commands (issue 45): a command that ignores SIGTERM is SIGKILLed
with everything of its group at the deadline, in bounded time; group_members and kill_group on a real
process group; the edges of the head-and-tail buffer and of what run_bounded reports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from engine.core.bounded_command import HeadTail, group_members, kill_group, run_bounded

# bash ignores TERM, and so does the sleep it starts (an ignored signal stays ignored across fork and exec)
DEAF = "trap '' TERM; echo group $$; sleep 60 & echo child $!; wait"


def gone(pid: int) -> bool:
    """Not running: no such pid, or a zombie (its parent, the command, was killed before it reaped it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def pids_of(output: str) -> dict[str, int]:
    return {word: int(pid) for word, pid in (line.split() for line in output.splitlines() if line.strip())}


def test_a_command_that_ignores_sigterm_is_killed_with_its_whole_group_at_the_deadline():
    started = time.monotonic()
    result = run_bounded(["bash", "-c", DEAF], timeout_s=0.5, kill_grace_s=0.2)
    seconds = time.monotonic() - started
    pids = pids_of(result.output)
    assert result.timed_out and result.returncode == -signal.SIGKILL, result
    assert gone(pids["group"]) and gone(pids["child"]), pids
    assert group_members(pids["group"]) == []
    # 0.5 s timeout + 0.2 s of SIGTERM ignored + the SIGKILL's effect; slack for a loaded machine, far below 60 s
    assert seconds < 5.0, seconds


def test_kill_group_sigkills_a_deaf_group_and_counts_its_members():
    proc = subprocess.Popen(["bash", "-c", DEAF], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        group, child = (int(proc.stdout.readline().split()[1]) for _ in range(2))
        assert group == proc.pid and sorted(group_members(group)) == sorted([group, child])
        started = time.monotonic()
        assert kill_group(group, 0.2) == 2
        assert time.monotonic() - started < 3.0
        proc.wait(timeout=5)
        assert proc.returncode == -signal.SIGKILL and gone(child) and group_members(group) == []
        assert kill_group(group, 0.2) == 0                 # nothing left: nothing found, nothing sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_kill_group_stops_a_group_that_obeys_sigterm_without_waiting_the_grace():
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        started = time.monotonic()
        assert kill_group(proc.pid, 5.0) == 1
        assert time.monotonic() - started < 2.5                # returned once the group was gone, not after 5 s
        assert proc.wait(timeout=5) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_group_members_leaves_out_zombies_and_other_groups():
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert group_members(proc.pid) == [proc.pid]
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not gone(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert group_members(proc.pid) == []                    # a zombie now, not reaped yet: not a member
        assert group_members(other.pid) == [other.pid]
    finally:
        for p in (proc, other):
            p.kill()
            p.wait()


def test_a_quick_command_reports_its_code_output_and_no_timeout():
    result = run_bounded([sys.executable, "-c", "print('hello'); raise SystemExit(3)"], timeout_s=30)
    assert (result.returncode, result.output, result.output_bytes, result.kept_bytes) == (3, "hello\n", 6, 6)
    assert not result.timed_out and not result.truncated and result.killed_left_behind == 0
    assert 0 < result.seconds < 30


def test_what_a_command_wrote_just_before_it_exited_is_kept():
    result = run_bounded([sys.executable, "-c", "import sys; sys.stdout.write('x' * 300000)"], timeout_s=30,
                         keep_bytes=1000)
    assert result.output_bytes == 300000 and result.kept_bytes == 1000 and result.truncated
    assert result.output == "x" * 500 + "\n[... 299,000 bytes left out ...]\n" + "x" * 500


def test_a_command_that_closes_its_output_but_runs_on_still_stops_at_the_deadline():
    started = time.monotonic()
    result = run_bounded(["bash", "-c", "echo bye; exec >&- 2>&-; sleep 60"], timeout_s=0.5, kill_grace_s=0.2)
    assert result.timed_out and result.output == "bye\n" and result.returncode == -signal.SIGTERM
    assert time.monotonic() - started < 4.0


def test_left_behind_processes_are_counted_when_the_command_itself_exits():
    result = run_bounded(["bash", "-c", "sleep 60 & sleep 61 & echo started"], timeout_s=30, kill_grace_s=0.2)
    assert not result.timed_out and result.returncode == 0 and result.killed_left_behind == 2
    assert result.seconds < 5


def test_head_tail_of_a_limit_of_one_keeps_one_byte_of_head_and_nothing_lost_from_the_count():
    kept = HeadTail(1)
    for chunk in (b"ab", b"", b"cd"):
        kept.add(chunk)
    assert (bytes(kept.head), bytes(kept.tail), kept.total, kept.kept) == (b"a", b"d", 4, 2)


def test_head_tail_exactly_full_is_the_whole_text():
    kept = HeadTail(8)
    kept.add(b"abcd")
    kept.add(b"efgh")
    assert kept.text() == "abcdefgh" and kept.kept == kept.total == 8
    kept.add(b"i")
    assert kept.text() == "abcd\n[... 1 bytes left out ...]\nfghi"


def test_a_command_that_closed_its_output_is_seen_to_exit_within_a_poll():
    started = time.monotonic()
    result = run_bounded(["bash", "-c", "echo bye; exec >&- 2>&-; sleep 0.1"], timeout_s=30)
    assert not result.timed_out and result.returncode == 0 and result.output == "bye\n"
    assert time.monotonic() - started < 0.9      # polled every POLL_S (0.05 s), not once a second
