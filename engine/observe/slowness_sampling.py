"""Samples a slow trainer from outside for engine/observe/diagnosis.py: its process tree, everyone else's CPU,
the cgroup's throttling, steal and iowait, PSI, and the data folder's read speed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from engine.observe.diagnosis import OtherProcess, RankSample, SlownessSamples

COMMAND_CHARS = 80
TOP_OTHERS = 10      # named in the samples; the verdict names the first 3
MIN_OTHER_PERCENT = 5.0     # a process below this share of one core is not named


def _cpu_seconds(proc: psutil.Process) -> float | None:
    try:
        times = proc.cpu_times()
        return times.user + times.system
    except psutil.Error:
        return None


def _all_cpu_seconds() -> dict[int, float]:
    found = {}
    for proc in psutil.process_iter():
        seconds = _cpu_seconds(proc)
        if seconds is not None:
            found[proc.pid] = seconds
    return found


def _command(pid: int) -> str:
    try:
        proc = psutil.Process(pid)
        text = " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return "?"
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 3] + "..."


def _cgroup_of(pid: int) -> tuple[str | None, Path | None, str]:
    """(cgroup path, its cpu controller folder, 'v2' or 'v1') of a process."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None, None, ""
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            for mount in ("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"):
                if Path(mount, path.lstrip("/"), "cpu.stat").exists():
                    return path, Path(mount, path.lstrip("/")), "v1"
    for line in lines:
        if line.startswith("0::"):
            path = line[3:]
            folder = Path("/sys/fs/cgroup", path.lstrip("/"))
            if (folder / "cpu.stat").exists():
                return path, folder, "v2"
    return None, None, ""


def _read_keyed(path: Path) -> dict[str, int]:
    values = {}
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                values[key] = int(value)
    except OSError:
        pass
    return values


def _throttling(folder: Path, version: str) -> tuple[int, float]:
    """(throttled periods, throttled seconds) so far."""
    stat = _read_keyed(folder / "cpu.stat")
    if version == "v2":
        return stat.get("nr_throttled", 0), stat.get("throttled_usec", 0) / 1e6
    return stat.get("nr_throttled", 0), stat.get("throttled_time", 0) / 1e9


def _quota_cores(folder: Path, version: str) -> float | None:
    try:
        if version == "v2":
            quota_text, period_text = (folder / "cpu.max").read_text().split()
            return None if quota_text == "max" else int(quota_text) / int(period_text)
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def _cpu_pressure() -> float | None:
    try:
        first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = dict(part.split("=", 1) for part in first.split()[1:] if "=" in part)
    try:
        return float(fields["avg10"])
    except (KeyError, ValueError):
        return None


def read_speed_mb_s(folder: Path | None, limit_bytes: int = 64 * 1024 * 1024) -> float | None:
    if folder is None or not folder.is_dir():
        return None
    started, read = time.perf_counter(), 0
    for path in sorted(folder.glob("*.txt")):
        with open(path, "rb") as fh:
            while read < limit_bytes and (chunk := fh.read(1 << 20)):
                read += len(chunk)
        if read >= limit_bytes:
            break
    elapsed = time.perf_counter() - started
    return round(read / 1e6 / elapsed, 1) if read and elapsed > 0 else None


def sample(trainer_pid: int, sample_seconds: float, num_workers: int = 0, rank_pids: dict[int, int] | None = None,
           rank_work_seconds: dict[int, float] | None = None, data_dir: Path | None = None) -> SlownessSamples:
    """Watch the machine for sample_seconds. rank_pids maps rank -> pid (several ranks); everything else in
    the trainer's process tree counts as its data workers. Raises psutil.Error when the trainer is gone."""
    root = psutil.Process(trainer_pid)
    ranks = dict(rank_pids or {0: trainer_pid})
    tree = {root.pid: root, **{c.pid: c for c in root.children(recursive=True)}}
    for pid in ranks.values():
        if pid not in tree:
            try:
                tree[pid] = psutil.Process(pid)
                tree.update({c.pid: c for c in tree[pid].children(recursive=True)})
            except psutil.Error:
                pass
    cgroup, folder, version = _cgroup_of(trainer_pid)
    throttled_before = _throttling(folder, version) if folder else None
    before = _all_cpu_seconds()
    psutil.cpu_times_percent(None)
    started = time.monotonic()
    stopped = {pid: 0 for pid in ranks.values()}
    disk_sleep = samples = 0
    while time.monotonic() - started < sample_seconds:
        samples += 1
        for pid in stopped:
            try:
                stopped[pid] += psutil.Process(pid).status() == psutil.STATUS_STOPPED
            except psutil.Error:
                pass
        try:
            disk_sleep += root.status() == psutil.STATUS_DISK_SLEEP
        except psutil.Error:
            pass
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    system = psutil.cpu_times_percent(None)
    after = _all_cpu_seconds()
    throttled_after = _throttling(folder, version) if folder else None

    def share(pid: int) -> float:
        return 100.0 * max(0.0, after.get(pid, 0.0) - before.get(pid, after.get(pid, 0.0))) / elapsed

    rank_set = set(ranks.values())
    watcher = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    others = sorted(((pid, share(pid)) for pid in after if pid not in tree and pid not in watcher),
                    key=lambda item: -item[1])
    named = [OtherProcess(pid=pid, command=_command(pid), cpu_percent=round(cpu, 1))
             for pid, cpu in others[:TOP_OTHERS] if cpu >= MIN_OTHER_PERCENT]
    samples = max(samples, 1)
    throttled_fraction = throttled_periods = None
    if throttled_before and throttled_after:
        throttled_periods = throttled_after[0] - throttled_before[0]
        throttled_fraction = round((throttled_after[1] - throttled_before[1]) / elapsed, 3)
    steps = rank_work_seconds or {}
    return SlownessSamples(
        cores=os.cpu_count() or 1, sample_seconds=round(elapsed, 2), num_workers=num_workers,
        trainer_pids=sorted(tree),
        trainer_cpu_percent=round(sum(share(pid) for pid in rank_set), 1),
        workers_cpu_percent=round(sum(share(pid) for pid in tree if pid not in rank_set), 1),
        stopped_fraction=round(max(stopped.values(), default=0) / samples, 2),
        disk_sleep_fraction=round(disk_sleep / samples, 2),
        system_idle_percent=round(system.idle, 1), iowait_percent=round(getattr(system, "iowait", 0.0), 1),
        steal_percent=round(getattr(system, "steal", 0.0), 1), cpu_pressure_some_avg10=_cpu_pressure(),
        others_cpu_percent=round(sum(cpu for _, cpu in others), 1), top_others=named,
        cgroup=cgroup, cgroup_quota_cores=_quota_cores(folder, version) if folder else None,
        throttled_fraction=throttled_fraction, throttled_periods=throttled_periods,
        ranks=[RankSample(rank=rank, pid=pid, stopped_fraction=round(stopped.get(pid, 0) / samples, 2),
                          work_seconds=steps.get(rank)) for rank, pid in sorted(ranks.items())] if len(ranks) > 1 else [],
        data_read_mb_s=read_speed_mb_s(data_dir),
    )
