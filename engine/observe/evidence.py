"""Evidence beyond the log text, gathered around a failure (`state.evidence`, engine/core/evidence.py).

- Free space of out_dir and run_dir: a write that failed on a nearly full disk is a full disk,
  whatever words the writer chose (PytorchStreamWriter's `unexpected pos`, an `OSError` of a logger).
- The kernel OOM killer: the trainer's memory cgroup counts the processes it killed (`oom_kill` in
  cgroup v2's memory.events, cgroup v1's memory.oom_control). The counter is read when the trainer
  is launched (or first seen) and again once it is seen dead: a rise is an OOM kill, so a silent
  SIGKILL is `oom`, not a mystery. /dev/kmsg, where readable, is searched (non-blocking, bounded)
  for the kernel's `Killed process <pid>` of the trainer.
- The checkpoint a failed launch resumed from, verified afresh (a callable lent by the watch loop:
  this package cannot reach engine/checkpoints): a load error on a corrupt file is a corrupt
  checkpoint; one on an intact file (a shape mismatch) is something else.

Every reading is bounded and fails to None ("unknown"), never raises.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.core.evidence import Evidence
from engine.core.state import CheckpointStatus, TrainerStatus

NEARLY_FULL_FLOOR_BYTES = 64 * 1024 * 1024   # free below this is nearly full ...
SMALL_FS_FRACTION = 0.05                     # ... on filesystems over 1.28 GB; below, 5% of the filesystem
NEARLY_FULL_FRACTION = 0.01                  # free below 1% of the filesystem is nearly full whatever its size

KMSG_PATH = "/dev/kmsg"
KMSG_MAX_RECORDS = 200_000     # the kernel's ring buffer holds far fewer; a bound, not an expectation
KMSG_MAX_BYTES = 16 * 1024 * 1024
KMSG_MAX_SECONDS = 0.5
KMSG_CLOCK_SLACK_S = 1.0       # the kernel's record clock vs CLOCK_MONOTONIC
_KILLED = re.compile(r"Killed process (\d+)|oom-kill:.*\bpid=(\d+)")

# (corrupt, problem) of the checkpoint a resume file is (or was copied from); None: cannot tell.
ResumeVerifier = Callable[[Path], "tuple[bool, str | None] | None"]


# --- disk ------------------------------------------------------------------------------------------
def free_space(path: Path) -> tuple[int, int] | None:
    """(free, total) bytes of the filesystem holding path (or its nearest existing parent)."""
    probe = Path(path)
    try:
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        usage = shutil.disk_usage(probe)
    except OSError:
        return None
    return usage.free, usage.total


def nearly_full(free: int, total: int, checkpoint_bytes: int = 0) -> bool:
    """Too little left for a save: under 1% of the filesystem, under min(64 MiB, 5% of it), or under the
    newest checkpoint's size."""
    floor = max(min(NEARLY_FULL_FLOOR_BYTES, SMALL_FS_FRACTION * total), NEARLY_FULL_FRACTION * total, checkpoint_bytes)
    return free < floor


# --- the OOM killer: cgroup counters --------------------------------------------------------------
@dataclass(frozen=True)
class OomCounter:
    """The `oom_kill` line of one cgroup's memory.events (v2) or memory.oom_control (v1)."""

    path: Path

    def read(self) -> int | None:
        try:
            with open(self.path, "rb") as fh:
                text = fh.read(64 * 1024).decode("ascii", "replace")
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return None


def _cgroup_mounts(mountinfo: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """([(root, mount point)] of cgroup2, [(root, mount point)] of cgroup v1 with the memory controller)."""
    v2, v1 = [], []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, point = fields[3], fields[4].replace("\\040", " ")
        if tail[0] == "cgroup2":
            v2.append((root, point))
        elif tail[0] == "cgroup" and "memory" in tail[2].split(","):
            v1.append((root, point))
    return v2, v1


def _under(root: str, point: str, path: str) -> Path | None:
    if root != "/" and not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None
    relative = path[len(root):] if root != "/" else path
    return Path(point, relative.lstrip("/"))


def oom_counter_of(pid: int | str) -> OomCounter | None:
    """The OOM-kill counter of a process's memory cgroup (pid "self": this process), or None."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    v2, v1 = _cgroup_mounts(mountinfo)
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            candidates = [(_under(r, p, path), "memory.events") for r, p in v2]
        elif "memory" in controllers.split(","):
            candidates = [(_under(r, p, path), "memory.oom_control") for r, p in v1]
        else:
            continue
        for folder, name in candidates:
            if folder is not None and (folder / name).is_file() and OomCounter(folder / name).read() is not None:
                return OomCounter(folder / name)
    return None


# --- the OOM killer: the kernel log ---------------------------------------------------------------
@dataclass(frozen=True)
class KernelLog:
    readable: bool
    oldest_s: float | None = None          # the oldest record's time (CLOCK_MONOTONIC seconds)
    kills: tuple[tuple[int, float, str], ...] = ()   # (pid, time, line) of each OOM kill record


def read_kernel_oom_kills(path: str = KMSG_PATH) -> KernelLog:
    """The OOM kills in the kernel's ring buffer, read without blocking and within bounds."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return KernelLog(False)
    kills, oldest, read_bytes = [], None, 0
    deadline = time.monotonic() + KMSG_MAX_SECONDS
    try:
        for _ in range(KMSG_MAX_RECORDS):
            if read_bytes > KMSG_MAX_BYTES or time.monotonic() > deadline:
                break
            try:
                record = os.read(fd, 16384)
            except BlockingIOError:
                break                       # the end of the buffer
            except OSError as error:
                if error.errno == errno.EPIPE:
                    continue                # records overwritten while reading: go on with the next
                if error.errno == errno.EINVAL and oldest is None:
                    return KernelLog(False)  # not a kmsg device
                break
            if not record:
                break
            read_bytes += len(record)
            header, _, message = record.decode("utf-8", "replace").partition(";")
            parts = header.split(",")
            try:
                stamp = int(parts[2]) / 1e6
            except (IndexError, ValueError):
                continue
            oldest = stamp if oldest is None else min(oldest, stamp)
            found = _KILLED.search(message.split("\n", 1)[0])
            if found:
                kills.append((int(found.group(1) or found.group(2)), stamp, message.split("\n", 1)[0].strip()))
    finally:
        os.close(fd)
    return KernelLog(True, oldest, tuple(kills))


def kernel_verdict(log: KernelLog, pids: set[int], since: float) -> tuple[bool | None, str | None]:
    """(True, line): the log names one of pids killed since `since`; (False, why): it reaches back before
    `since` and does not; (None, None): unreadable, or too short to tell."""
    if not log.readable:
        return None, None
    for pid, stamp, line in log.kills:
        if pid in pids and stamp >= since - KMSG_CLOCK_SLACK_S:
            return True, f"kernel log: {line}"
    if log.oldest_s is not None and log.oldest_s <= since:
        return False, "kernel log: no OOM kill of the trainer"
    return None, None


# --- one launch's evidence ------------------------------------------------------------------------
@dataclass
class _Launch:
    pid: int
    since: float                      # CLOCK_MONOTONIC when it was launched (or first seen)
    counter: OomCounter | None
    baseline: int | None
    resume_file: Path | None = None
    oom: tuple[bool | None, str | None] | None = None         # judged once, when seen dead
    resume: tuple[bool | None, str | None] | None = None


def oom_verdict(before: int | None, after: int | None, counter: OomCounter | None,
                kernel: tuple[bool | None, str | None]) -> tuple[bool | None, str | None]:
    """True if either source saw an OOM kill; False if a readable one says not; None when neither can tell."""
    cgroup: tuple[bool | None, str | None] = (None, None)
    if counter is not None and before is not None and after is not None:
        cgroup = (after > before, f"oom_kill {before} -> {after} in {counter.path}")
    if cgroup[0] or kernel[0]:
        return True, "; ".join(d for v, d in (cgroup, kernel) if v and d)
    if cgroup[0] is False or kernel[0] is False:
        return False, "; ".join(d for v, d in (cgroup, kernel) if v is False and d)
    return None, None


class EvidenceGatherer:
    """Kept by the Observer; `launched` at each launch, `gather` at each snapshot."""

    def __init__(self, out_dir: Path, run_dir: Path | None = None, verify_resume: ResumeVerifier | None = None,
                 kmsg_path: str = KMSG_PATH):
        self.out_dir = Path(out_dir)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.verify_resume = verify_resume
        self.kmsg_path = kmsg_path
        self.launch: _Launch | None = None

    def launched(self, pid: int, resume_file: Path | None = None) -> None:
        """Right after a launch: the counter's value before anything could have been killed."""
        counter = oom_counter_of(pid) or oom_counter_of("self")   # a child starts in its parent's cgroup
        self.launch = _Launch(pid, time.monotonic(), counter, counter.read() if counter else None,
                              Path(resume_file) if resume_file else None)

    def gather(self, trainer: TrainerStatus, checkpoints: CheckpointStatus | None = None) -> Evidence:
        out = free_space(self.out_dir)
        run = free_space(self.run_dir) if self.run_dir is not None else None
        ckpt_bytes = checkpoints.last_size_bytes if checkpoints is not None else 0
        full = [nearly_full(space[0], space[1], ckpt_bytes) for space in (out, run) if space and space[1]]
        fields: dict = {
            "out_dir_free_bytes": out[0] if out else None,
            "run_dir_free_bytes": run[0] if run else None,
            "disk_nearly_full": any(full) if full else None,
        }
        launch = self._launch_of(trainer)
        if launch is not None:
            fields["resume_checkpoint"] = str(launch.resume_file) if launch.resume_file else None
            if not trainer.alive:
                if launch.oom is None:
                    launch.oom = self._judge_oom(launch, trainer)
                fields["oom_killed"], fields["oom_detail"] = launch.oom
                if trainer.exit_code not in (0, None) and launch.resume_file is not None:
                    if launch.resume is None:
                        launch.resume = self._judge_resume(launch.resume_file)
                    fields["resume_checkpoint_corrupt"], fields["resume_checkpoint_problem"] = launch.resume
        return Evidence(**fields)

    def _launch_of(self, trainer: TrainerStatus) -> _Launch | None:
        if trainer.pid is None:
            return None
        if self.launch is None or self.launch.pid != trainer.pid:
            if not trainer.alive:   # first seen dead (a watcher re-attached after it ended): no baseline
                self.launch = _Launch(trainer.pid, time.monotonic() - trainer.seconds_running, None, None)
            else:                   # first seen alive (re-attached): from now on
                self.launched(trainer.pid)
        return self.launch

    def _judge_oom(self, launch: _Launch, trainer: TrainerStatus) -> tuple[bool | None, str | None]:
        after = launch.counter.read() if launch.counter is not None else None
        pids = {launch.pid} | {r.pid for r in trainer.ranks.ranks if r.pid is not None}
        kernel = kernel_verdict(read_kernel_oom_kills(self.kmsg_path), pids, launch.since)
        return oom_verdict(launch.baseline, after, launch.counter, kernel)

    def _judge_resume(self, resume_file: Path) -> tuple[bool | None, str | None]:
        if self.verify_resume is None:
            return None, None
        try:
            verdict = self.verify_resume(resume_file)
        except OSError as error:
            return None, f"could not verify {resume_file}: {error}"
        return verdict if verdict is not None else (None, None)
