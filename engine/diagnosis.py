"""Why is training slow? Sample the trainer process from outside and say so, with the numbers."""

from __future__ import annotations

import os
import time

import psutil


def _read_speed_mb_s(folder, limit_bytes: int = 64 * 1024 * 1024) -> float | None:
    files = sorted(folder.glob("*.txt"))
    if not files:
        return None
    started, read = time.perf_counter(), 0
    for path in files:
        with open(path, "rb") as fh:
            while read < limit_bytes and (chunk := fh.read(1 << 20)):
                read += len(chunk)
        if read >= limit_bytes:
            break
    elapsed = time.perf_counter() - started
    return read / 1e6 / elapsed if elapsed > 0 else None


def diagnose_slowness(trainer, loaded, sample_seconds: float) -> dict:
    """Sample CPU of the trainer and its children, how often it is stopped, and iowait."""
    evidence: dict = {"num_workers": loaded.config.trainer.num_workers, "cores": os.cpu_count()}
    try:
        proc = psutil.Process(trainer.pid)
        children = proc.children(recursive=True)
        procs = [proc, *children]
        for p in procs:
            p.cpu_percent(None)
        system_before = psutil.cpu_times_percent(None)
        stopped = samples = 0
        deadline = time.monotonic() + sample_seconds
        while time.monotonic() < deadline:
            samples += 1
            stopped += proc.status() == psutil.STATUS_STOPPED
            time.sleep(0.05)
        evidence["trainer_cpu_percent"] = round(proc.cpu_percent(None), 1)
        evidence["workers_cpu_percent"] = round(sum(c.cpu_percent(None) for c in children), 1)
        evidence["stopped_fraction"] = round(stopped / max(samples, 1), 2)
        system = psutil.cpu_times_percent(None)
        evidence["iowait_percent"] = round(getattr(system, "iowait", 0.0), 1)
        evidence["system_idle_percent"] = round(system.idle, 1)
        del system_before
    except psutil.Error as error:
        return {"verdict": f"could not sample the trainer: {error}", "evidence": evidence}
    evidence["data_read_mb_s"] = _read_speed_mb_s(loaded.data_path("train_dir"))
    return {"verdict": _verdict(evidence), "evidence": evidence}


def _verdict(e: dict) -> str:
    """Pure: the most likely cause from the evidence, in one sentence."""
    if e["stopped_fraction"] >= 0.1:
        return (f"the trainer is being stopped from outside ({e['stopped_fraction']:.0%} of samples in state T: "
                "SIGSTOP, a cgroup freezer or a debugger); not a data or compute problem")
    if e["iowait_percent"] >= 20:
        return f"storage: {e['iowait_percent']}% iowait; data reads at {e['data_read_mb_s']} MB/s"
    if e["num_workers"] > 0 and e["workers_cpu_percent"] >= 90 * e["num_workers"]:
        return f"data workers saturated ({e['workers_cpu_percent']}% CPU over {e['num_workers']} workers): add num_workers"
    if e["trainer_cpu_percent"] < 50 and e["system_idle_percent"] < 20:
        return (f"CPU contention: the trainer got {e['trainer_cpu_percent']}% CPU while the machine was "
                f"{100 - e['system_idle_percent']:.0f}% busy with other work")
    if e["num_workers"] == 0 and e["trainer_cpu_percent"] >= 90:
        return "the trainer is CPU-bound and loads data in its own process (num_workers: 0); more workers may help"
    return (f"no single cause found: trainer CPU {e['trainer_cpu_percent']}%, workers {e['workers_cpu_percent']}%, "
            f"iowait {e['iowait_percent']}%")
