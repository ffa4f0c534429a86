"""The chaos run's contenders and their harness (benchmarks/bench_chaos.py runs them and writes the report).

The run settings, the fault schedule and its injector thread, the shared data cache, and one function per
contender: the undisturbed reference, `runbook watch`, and the naive restart loop, each returning an
Outcome (benchmarks/chaos_report.py) read from what the run left on disk.

TRAINER "litgpt" (the full benchmark) trains the real tiny litgpt model; "toy" (bench_chaos.py --smoke)
trains tests/toy_trainer/ instead: the same schedule and contenders, the OOM at start being the toy's own
(trainer.extra.oom_above_micro_batch: a micro-batch above GOOD_MB fails at start), no address-space limit,
no data cache, and the naive loop's `litgpt pretrain` with `resume: auto` played by benchmarks/toy_pretrain.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.bench_math import longest_gap  # noqa: E402
from benchmarks.chaos_report import Outcome  # noqa: E402
from engine.watch import faults  # noqa: E402

BLOCK = 64
BATCH = 256
GOOD_MB, OOM_MB = 128, 256
MEMORY_LIMIT_MB = 1160   # replaced by set_memory_limit() with the midpoint of the measured footprints (--memory-limit-mb fixes it)
FOOTPRINTS: dict[int, float] = {}   # micro-batch -> the trainer's measured VmPeak (MB), filled by run_reference / probe_footprint
MIN_GAP_MB = 60          # the OOM is deterministic when the limit lies this far from both footprints
TMPFS_MB = 13
SAVE_INTERVAL = 2
DEVICE = "cpu"   # --device cuda: no address-space limit (a CUDA process cannot run under one), no OOM at start
TRAINER = "litgpt"   # --trainer toy (--smoke's default): tests/toy_trainer/ instead of litgpt
TOY_STEP_SECONDS = 0.25   # the toy's pace: the injector's 50 ms polls meet each checkpoint well before the next

NAIVE_LOOP = r"""#!/usr/bin/env bash
# The naive loop: `until litgpt pretrain --config X; do :; done` (X has resume: auto), at most CAP restarts.
# Same generated litgpt config and environment as runbook's launches; same memory limit (ulimit -v = RLIMIT_AS).
cfg=$1; logs=$2; pidfile=$3; cap=$4; mem_kb=$5; litgpt=$6
[ -n "$mem_kb" ] && ulimit -v "$mem_kb"
n=0
until
  n=$((n + 1))
  "$litgpt" pretrain --config "$cfg" > "$logs/trainer-$(printf %03d $n).log" 2>&1 &
  echo $! > "$pidfile"
  wait $!
do
  [ "$n" -gt "$cap" ] && exit 1
done
exit 0
"""


def settings(micro_batch: int, steps: int, lr: float | None = None) -> dict:
    out = {
        "micro_batch_size": micro_batch, "batch_size": BATCH, "max_tokens": BATCH * BLOCK * steps,
        "save_interval": SAVE_INTERVAL, "keep_last_k": 3,
        "trainer": {"memory_limit_mb": MEMORY_LIMIT_MB if DEVICE == "cpu" else None, "device": DEVICE},
        "watch": dict(faults.FAULTS["hang"].config["watch"]),
    }
    if TRAINER == "toy":   # its steps are max_tokens / (BATCH x BLOCK): `steps` of them; micro-batches above GOOD_MB fail
        toy = common.toy_settings(steps, TOY_STEP_SECONDS, SAVE_INTERVAL, oom_above_micro_batch=GOOD_MB)
        out["trainer"] = {**toy["trainer"], "device": DEVICE}
    if lr is not None:
        out["lr"] = lr
    return out


# --- the schedule, injected with engine/watch/faults.py's own injectors -------------------------------


def trainer_kind() -> str:
    return common.TOY_KIND if TRAINER == "toy" else "litgpt"


def checkpoint_layout():
    """The trainer's checkpoint layout (folder names: litgpt's step-NNNNNNNN, the toy's ckpt-NNNNNN)."""
    from engine.trainers import adapter_for

    return adapter_for(trainer_kind()).layout


def checkpoint_saved(out_dir: Path, step: int) -> bool:
    """The checkpoint at `step` is completely written (the toy writes its checksum file last)."""
    if TRAINER == "toy":
        return (out_dir / f"ckpt-{step:06d}" / "state.sha256").exists()
    return common.checkpoint_done(out_dir, step)


class StepRun(faults.DrillRun):
    """faults.DrillRun whose 'checkpoint N' is the checkpoint at a given optimizer step: the
    injectors then fire at the same point of the run for every contender."""

    def __init__(self, out_dir, run_dir, proc, timeout, step):
        from engine.trainers import adapter_for

        super().__init__(out_dir, run_dir, proc, adapter_for(trainer_kind()), timeout)
        self.step = step

    def wait_for_checkpoint(self, count: int) -> Path:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if checkpoint_saved(self.out_dir, self.step):
                return self.out_dir / self.layout.folder_name(self.step)
            if self.watcher.poll() is not None:
                raise RuntimeError(f"the contender ended (exit {self.watcher.returncode}) before step {self.step}")
            time.sleep(0.05)
        raise TimeoutError(f"no checkpoint at step {self.step} after {self.timeout:g} s")


SCHEDULE = [  # (checkpoint step, label, injector from engine/watch/faults.py)
    (4, "SIGTERM", faults._signal_after_checkpoint(signal.SIGTERM, 1)),
    (6, "SIGSTOP hang", faults._signal_after_checkpoint(signal.SIGSTOP, 1)),
    (10, "truncate newest + flip a byte in the one before + SIGKILL", faults._corrupt_then_kill),
]


def data_cache(root: Path) -> Path | None:
    """litgpt's preprocessed copy of the data (TextFiles writes it on a run's first launch), made
    once and copied into every contender's run folder, so no launch pays for it and every launch
    has the same memory footprint (the first launch's preprocessing adds about 200 MB of address
    space, which would otherwise decide whether a micro-batch fits). None for the toy: it reads no
    tokenized data."""
    from engine.trainers.litgpt.data_cache import is_complete

    if TRAINER == "toy":
        return None
    cache = root / "data-cache"
    if cache.is_dir() and any(is_complete(folder) for folder in cache.iterdir()):   # made by an earlier run in root
        return cache
    seeded = root / "data-cache-seed"
    if common.seed_data(seeded):   # the suite's smokes: the tokenized data an earlier benchmark published
        shutil.rmtree(cache, ignore_errors=True)
        os.rename(seeded / "data", cache)
        shutil.rmtree(seeded)
        return cache
    warm_up = settings(GOOD_MB, 1)
    warm_up["trainer"]["memory_limit_mb"] = None  # preprocessing needs more than the limit allows
    config = common.scratch_project(root / "data-cache-project", **warm_up)
    loaded = common.load_run(config)
    spec = common.litgpt_launch(config, loaded.run_dir / "launches" / "cache")
    log = loaded.run_dir / "logs" / "cache.log"
    if common.start_bare(spec, log).wait() != 0:
        raise RuntimeError(f"preparing the data cache failed: see {log}")
    if cache.exists():
        shutil.rmtree(cache)
    shutil.copytree(loaded.run_dir / "data", cache, symlinks=True)
    common.share_data(loaded.run_dir)
    return cache


def project(root: Path, run_settings: dict, cache: Path | None) -> Path:
    """A contender's scratch project with the benchmark's own data cache (common.scratch_project leaves
    its run folder without data: whatever the repository's run folder holds, every contender reads
    this same cache; the toy's, cache None, needs none)."""
    config = common.scratch_project(root, **run_settings)
    if cache is None:
        return config
    data = common.load_run(config).run_dir / "data"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(cache, data, symlinks=True)
    return config


class Injector(threading.Thread):
    def __init__(self, out_dir: Path, run_dir: Path, proc: subprocess.Popen, timeout: float, schedule):
        super().__init__(daemon=True)
        self.args = (out_dir, run_dir, proc, timeout)
        self.schedule = schedule
        self.injected: list[tuple[str, float]] = []
        self.intact: dict[float, list[int]] = {}   # injection time -> checkpoint steps left intact by it
        self.error: str | None = None

    def run(self) -> None:
        out_dir = self.args[0]
        for step, label, inject in self.schedule:
            try:
                at = inject(StepRun(*self.args, step=step))
            except (RuntimeError, TimeoutError, ProcessLookupError, FileNotFoundError) as err:
                self.error = f"{label}: not injected ({err})"
                return
            steps = sorted(s for p in out_dir.glob("*") if (s := checkpoint_layout().step_of(p.name)) is not None)
            if inject is faults._corrupt_then_kill:  # it damaged the newest and the one before it
                steps = [s for s in steps if s != step][:-1]
            self.injected.append((label, at))
            self.intact[at] = steps


# --- contenders ---------------------------------------------------------------------------------


def delivered(out_dir: Path, run_dir: Path, logs: list[Path], outcome: Outcome) -> None:
    """Fill steps, tokens, val loss and steps computed from final/ and the trainer logs."""
    from ruamel.yaml import YAML

    figures = common.log_figures(logs)
    outcome.steps_computed = figures.steps_computed
    outcome.first_loss = figures.first_loss
    progress = common.final_progress(out_dir)
    if progress is None:
        return
    if TRAINER == "toy":   # its final/ holds the step only; each of its steps is one global batch
        outcome.steps = progress["step_count"]
        outcome.tokens = outcome.steps * BATCH * BLOCK
        return
    hyper = YAML(typ="safe", pure=True).load((out_dir / "final" / "hyperparameters.yaml").read_text())
    micro_batch = int(hyper["train"]["micro_batch_size"])
    outcome.steps = progress["step_count"]
    outcome.tokens = progress["iter_num"] * micro_batch * BLOCK
    outcome.val_loss = figures.final_val_loss


trainer_logs = common.trainer_logs


def litgpt_executable() -> str:
    """`litgpt` as installed beside this Python: the reference and the naive loop run litgpt as it is."""
    return shutil.which("litgpt", path=str(Path(sys.executable).parent)) or "litgpt"


TOY_LITGPT = """#!/bin/sh
# the naive loop's `litgpt pretrain --config X` for the toy trainer (benchmarks/toy_pretrain.py: resume: auto)
exec "{python}" "{script}" "$@"
"""


def naive_executable(run_dir: Path) -> str:
    """What the naive loop runs as `$litgpt pretrain --config X`: litgpt itself, or for the toy a shim in
    run_dir that runs benchmarks/toy_pretrain.py (same pid: each exec replaces the one before)."""
    if TRAINER != "toy":
        return litgpt_executable()
    shim = run_dir / "toy-litgpt"
    shim.write_text(TOY_LITGPT.format(python=sys.executable, script=Path(__file__).with_name("toy_pretrain.py")))
    shim.chmod(0o755)
    return str(shim)


def trainer_launch(config: Path, launch_dir: Path, resume: str | None = None):
    """The launch runbook would make of config (common.litgpt_launch for litgpt; the toy's adapter, with
    resume "auto" written into its config for benchmarks/toy_pretrain.py, for the toy)."""
    if TRAINER != "toy":
        return common.litgpt_launch(config, launch_dir, resume=resume)
    from engine.trainers import adapter_for

    spec = adapter_for(common.TOY_KIND).prepare_launch(common.load_run(config), launch_dir, None, "")
    if resume is not None:
        tree = json.loads(spec.config_file.read_text())
        spec.config_file.write_text(json.dumps({**tree, "resume": resume}, indent=1))
    return spec


def first_progress_time(log: Path, proc: subprocess.Popen, found: dict) -> None:
    """found['at'] = when the log's first progress line appeared, found['times'] = when each new progress
    line appeared (the log polled every 20 ms, as the watcher stamps a line when it reads it), until the
    process ends."""
    found["times"] = []
    seen = 0
    while proc.poll() is None:
        if log.exists():
            count = common.count_progress_lines(common.read_log(log))
            if count > seen:
                now = time.time()
                found.setdefault("at", now)
                found["times"].extend([now] * (count - seen))
                seen = count
        time.sleep(0.02)


def vm_peak_mb(pid: int) -> float | None:
    """The process's peak address space (VmPeak, what RLIMIT_AS bounds), in MB (2^20 bytes)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class ProgressStamps(threading.Thread):
    """When each progress line of a run's trainer logs appeared (the newest logs polled every 50 ms, as the
    watcher stamps a line when it reads it): per log, so a gap never spans a relaunch (the watcher's tracker
    measures gaps within a launch)."""

    def __init__(self, run_dir: Path, proc: subprocess.Popen):
        super().__init__(daemon=True)
        self.run_dir, self.proc = run_dir, proc
        self.stamps: dict[str, list[float]] = {}

    def run(self) -> None:
        while self.proc.poll() is None:
            logs = trainer_logs(self.run_dir)
            for log in logs[-2:]:   # the newest, and the one before it (its last lines may have come late)
                seen = self.stamps.setdefault(log.name, [])
                count = common.count_progress_lines(common.read_log(log))
                if count > len(seen):
                    seen.extend([time.time()] * (count - len(seen)))
            time.sleep(0.05)

    def longest_gap_before(self, until: float | None) -> float | None:
        gaps = [longest_gap([t for t in times if until is None or t <= until]) for times in self.stamps.values()]
        return max((g for g in gaps if g is not None), default=None)


class PeakWatch(threading.Thread):
    """The largest VmPeak of a process and of each of its descendants (the limit is per process),
    polled every 20 ms until it exits."""

    def __init__(self, proc: subprocess.Popen):
        super().__init__(daemon=True)
        self.proc, self.peak_mb = proc, 0.0

    def run(self) -> None:
        import psutil

        while self.proc.poll() is None:
            try:
                pids = [self.proc.pid] + [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
            except psutil.Error:
                pids = [self.proc.pid]
            for pid in pids:
                self.peak_mb = max(self.peak_mb, vm_peak_mb(pid) or 0.0)
            time.sleep(0.02)


def run_reference(root: Path, steps: int, cache: Path) -> Outcome:
    """The reference run, without the memory limit: it measures the trainer's footprint at GOOD_MB
    (FOOTPRINTS), which set_memory_limit() places the contenders' limit by."""
    from dataclasses import replace

    config = project(root, settings(GOOD_MB, steps), cache)
    loaded = common.load_run(config)
    spec = trainer_launch(config, loaded.run_dir / "launches" / "reference")
    if TRAINER != "toy":
        spec = replace(spec, argv=[litgpt_executable(), "pretrain", "--config", str(spec.config_file)], memory_limit_bytes=None)
    out = Outcome(f"(a) reference: {TRAINER}, no fault", load=common.load_average())
    started = time.time()
    log = loaded.run_dir / "logs" / "trainer-001.log"
    proc = common.start_bare(spec, log)
    found: dict = {}
    watcher = threading.Thread(target=first_progress_time, args=(log, proc, found), daemon=True)
    watcher.start()
    peak = PeakWatch(proc)
    peak.start()
    code = proc.wait()
    out.wall_s = time.time() - started
    watcher.join(timeout=1)
    peak.join(timeout=1)
    FOOTPRINTS[GOOD_MB] = peak.peak_mb
    out.timeline = {"started": started, "first_progress": found.get("at"),
                    "iter_s": sum(common.log_figures([log]).iter_ms) / 1000,
                    "longest_gap_s": longest_gap(found.get("times") or [])}
    delivered(loaded.out_dir, loaded.run_dir, trainer_logs(loaded.run_dir), out)
    out.completed = code == 0 and out.steps is not None
    out.note = "completed" if out.completed else f"exit {code}"
    return out


def probe_footprint(root: Path, micro_batch: int, cache: Path) -> float:
    """The trainer's VmPeak (MB) in a one-step bare run at micro_batch without the memory limit."""
    run_settings = settings(micro_batch, 1)
    run_settings["trainer"]["memory_limit_mb"] = None
    config = project(root, run_settings, cache)
    loaded = common.load_run(config)
    spec = common.litgpt_launch(config, loaded.run_dir / "launches" / "probe")
    proc = common.start_bare(spec, loaded.run_dir / "logs" / "probe.log")
    peak = PeakWatch(proc)
    peak.start()
    if proc.wait() != 0:
        raise RuntimeError(f"the footprint probe at micro-batch {micro_batch} failed: see {loaded.run_dir / 'logs' / 'probe.log'}")
    peak.join(timeout=1)
    FOOTPRINTS[micro_batch] = peak.peak_mb
    return peak.peak_mb


def set_memory_limit(fixed_mb: int | None = None) -> str:
    """MEMORY_LIMIT_MB for the contenders: fixed_mb when given, else the midpoint of the measured
    footprints at GOOD_MB (the reference) and OOM_MB (the probe), so the launch at OOM_MB runs out
    of address space and the one at GOOD_MB fits, each by half the gap, every run alike (a fixed
    number drifts out of that window as the machine and the libraries change). Returns a sentence
    for the report."""
    global MEMORY_LIMIT_MB
    good, bad = FOOTPRINTS.get(GOOD_MB), FOOTPRINTS.get(OOM_MB)
    measured = (f"measured peak address space (VmPeak): micro-batch {GOOD_MB} {good:.0f} MB (the reference)"
                + (f", {OOM_MB} {bad:.0f} MB (a one-step probe)" if bad else "")) if good else "footprints not measured"
    if fixed_mb is not None:
        MEMORY_LIMIT_MB = fixed_mb
        return f"limit {fixed_mb} MB, fixed by --memory-limit-mb; {measured}"
    if not (good and bad):
        return f"limit {MEMORY_LIMIT_MB} MB (default); {measured}"
    MEMORY_LIMIT_MB = int(round((good + bad) / 2))
    gap = (bad - good) / 2
    warning = "" if gap >= MIN_GAP_MB else (f"; **the gap is only {gap:.0f} MB each side: the OOM at start may not be "
                                            f"deterministic on this machine**")
    return f"limit {MEMORY_LIMIT_MB} MB, the midpoint of the {measured} ({gap:.0f} MB each side){warning}"


def mount_disk(loaded, use_tmpfs: bool) -> str | None:
    if not use_tmpfs:
        return "no disk fault in this run"
    return common.mount_tmpfs(loaded.out_dir, TMPFS_MB)


def run_runbook(root: Path, run_settings: dict, schedule, use_tmpfs: bool, timeout: float, name: str, cache: Path) -> Outcome:
    config = project(root, run_settings, cache)
    loaded = common.load_run(config)
    disk_skip = mount_disk(loaded, use_tmpfs)
    out = Outcome(name, load=common.load_average())
    try:
        started = time.time()
        proc = common.start_watch(config, root / "watch.log")
        injector = Injector(loaded.out_dir, loaded.run_dir, proc, timeout, schedule)
        injector.start()
        stamps = ProgressStamps(loaded.run_dir, proc)
        stamps.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            common.stop(proc)  # only if still running
        out.wall_s = time.time() - started
        injector.join(timeout=5)
        delivered(loaded.out_dir, loaded.run_dir, trainer_logs(loaded.run_dir), out)
        out.completed = code == 0 and out.steps is not None
        records = common.incidents(loaded.run_dir)
        out.timeline = runbook_timeline(loaded.run_dir, started, records, injector.injected)
        out.injected = [label for label, _at in injector.injected]
        stamps.join(timeout=2)
        hang_at = next((at for label, at in injector.injected if "SIGSTOP" in label), None)
        out.timeline["longest_gap_s"] = stamps.longest_gap_before(hang_at)   # what the watcher had seen at the hang
        answered = answering_incidents(records, injector.injected)
        for record in records:
            out.incidents.append(f"{record['playbook']} ({record['outcome']})")
            out.steps_lost.append(record.get("steps_lost"))
            at = answered.get(record["id"])
            out.details.append(record_detail(record, at, injector.intact.get(at)))
        out.note = "; ".join(filter(None, [
            "completed" if out.completed else f"watch exit {code}",
            f"disk fault skipped: {disk_skip}" if disk_skip and use_tmpfs else "",
            injector.error or "",
        ]))
    finally:
        if not disk_skip:
            keep_disk_evidence(loaded.out_dir, root)
            common.unmount(loaded.out_dir)
    return out


SPARE_CPU = re.compile(r"^runbook: warm spare pid \d+ \(imports done [\d.]+ s ago, ([\d.]+) CPU s\)")


def runbook_timeline(run_dir: Path, started: float, records: list[dict], injected: list[tuple[str, float]]) -> dict:
    """The times chaos_report.accounting splits runbook's wall time by: launches (journal), incidents, iterations."""
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]
    return {"started": started, "launches": [e["time"] for e in journal if e.get("kind") == "launch"],
            "iter_s": sum(common.log_figures(trainer_logs(run_dir)).iter_ms) / 1000,
            "incidents": [{"playbook": r["playbook"], "detected_at": r["detected_at"], "closed_at": r.get("closed_at"),
                           "runbook_s": r.get("runbook_seconds") or 0.0, "restart_s": r.get("trainer_restart_seconds") or 0.0,
                           "hang_timeout_s": (r.get("snapshot") or {}).get("hang_timeout_s"),
                           "steps_lost": r.get("steps_lost") or 0} for r in records],
            "injected": [at for _label, at in injected],
            # launches that were a warm spare (engine/process/spare_main.py's first line in the launch's log)
            "warm_launches": [common.read_log(log).startswith("runbook: warm spare pid") for log in trainer_logs(run_dir)],
            "spare_import_cpu_s": sum(float(m.group(1)) for log in trainer_logs(run_dir)
                                      if (m := SPARE_CPU.search(common.read_log(log)[:300])))}


def keep_disk_evidence(out_dir: Path, root: Path) -> None:
    """What was on the tmpfs, listed before it is unmounted."""
    listing = subprocess.run(["ls", "-la", "--time-style=+", *sorted(map(str, out_dir.glob("*")))],
                             capture_output=True, text=True).stdout
    usage = subprocess.run(["df", "-k", str(out_dir)], capture_output=True, text=True).stdout
    (root / "out_dir-at-end.txt").write_text(usage + "\n" + listing)


def answering_incidents(records: list[dict], injected: list[tuple[str, float]]) -> dict:
    """incident id -> injection time, for the first incident (other than disk-low) after each injection."""
    found = {}
    for _label, at in injected:
        first = next((r for r in records if r["detected_at"] >= at and r["playbook"] != "disk-low" and r["id"] not in found), None)
        if first is not None:
            found[first["id"]] = at
    return found


def record_detail(record: dict, at: float | None, intact: list[int] | None) -> dict:
    failed = record.get("step_at_failure")
    allowed = None
    if intact is not None and failed is not None:
        allowed = failed - max([s for s in intact if s <= failed], default=0)
    return {
        "allowed": allowed,
        "id": record["id"], "playbook": record["playbook"], "outcome": record["outcome"],
        "step_at_failure": record.get("step_at_failure"), "resumed_step": record.get("resumed_step"),
        "steps_lost": record.get("steps_lost"),
        "after_injection_s": round(record["detected_at"] - at, 2) if at is not None else None,
        "runbook_s": record.get("runbook_seconds"), "trainer_restart_s": record.get("trainer_restart_seconds"),
        "config_changes": record.get("config_changes") or {},
        "note": incident_note(record, at),
    }


def incident_note(record: dict, at: float | None) -> str:
    snap = record.get("snapshot") or {}
    if record["playbook"] == "hang":
        since, timeout = snap.get("seconds_since_progress") or 0, snap.get("hang_timeout_s") or 0
        if (snap.get("trainer") or {}).get("stopped"):
            return f"trainer stopped (SIGSTOP); {since:.1f} s without progress, timeout {timeout:.1f} s"
        return (f"**false alarm**: the trainer was running; {since:.1f} s without progress (a checkpoint save) "
                f"against a timeout of {timeout:.1f} s")
    if record["playbook"] in ("loss-spike", "nan"):
        return "; ".join(record.get("notes") or [])[:160]
    if record["playbook"] == "disk-low":
        return f"freed {record.get('freed_bytes', 0) / 1e6:.1f} MB"
    return ""


def run_naive(root: Path, run_settings: dict, schedule, use_tmpfs: bool, timeout: float, cap: int, name: str,
              cache: Path, patience: float | None = None, assisted: bool = False) -> Outcome:
    """The naive loop. Without `assisted` it runs as it is: a hang it never notices is given up on
    after `patience` s without progress. With `assisted`, a human kills a hung trainer after
    `patience` s (counted as a human action) and the loop goes on."""
    config = project(root, run_settings, cache)
    loaded = common.load_run(config)
    disk_skip = mount_disk(loaded, use_tmpfs)
    out = Outcome(name, load=common.load_average())
    logs_dir = loaded.run_dir / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    proc = None
    try:
        spec = trainer_launch(config, loaded.run_dir / "launches" / "naive", resume="auto")
        script = loaded.run_dir / "naive_loop.sh"
        script.write_text(NAIVE_LOOP)
        mem_kb = str(spec.memory_limit_bytes // 1024) if spec.memory_limit_bytes else ""
        started = time.time()
        proc = subprocess.Popen(["bash", str(script), str(spec.config_file), str(logs_dir), str(loaded.run_dir / "trainer.pid"),
                                 str(cap), mem_kb, naive_executable(loaded.run_dir)], env=spec.env, cwd=spec.cwd,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        injector = Injector(loaded.out_dir, loaded.run_dir, proc, timeout, schedule)
        injector.start()
        code, hung = None, 0
        last_lines, last_change = -1, time.monotonic()
        while True:
            try:
                code = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            lines = common.log_figures(trainer_logs(loaded.run_dir)).progress_lines
            if lines != last_lines:
                last_lines, last_change = lines, time.monotonic()
            stalled = time.monotonic() - last_change
            if time.time() - started > timeout:
                out.note = f"stopped by the benchmark after {timeout:g} s"
                common.stop(proc)
                break
            if patience is not None and stalled > patience and injector.injected and "SIGSTOP" in injector.injected[-1][0]:
                if not assisted:
                    out.note = f"hung: no progress for {patience:g} s after the SIGSTOP; the loop never notices (stopped by the benchmark)"
                    hung = 1
                    common.stop(proc)
                    break
                pid = int((loaded.run_dir / "trainer.pid").read_text())
                if process_stopped(pid):   # the on-call human kills a trainer that is stopped, not one starting up
                    os.kill(pid, signal.SIGKILL)
                    out.human_actions += 1
                    hung += 1
                last_change = time.monotonic()
        out.wall_s = time.time() - started
        injector.join(timeout=5)
        logs = trainer_logs(loaded.run_dir)
        delivered(loaded.out_dir, loaded.run_dir, logs, out)
        out.completed = code == 0 and out.steps is not None
        out.incidents, out.steps_lost = naive_incidents(logs)
        out.injected = [label for label, _at in injector.injected]
        if logs and not out.completed:
            out.last_failure = classify(logs[-1])
        if hung and not assisted:
            out.incidents.append("hang (never detected)")
            out.steps_lost.append(None)
        if not out.note:
            out.note = "completed" if out.completed else f"gave up: restart cap {cap} reached" if code == 1 else f"exit {code}"
        if out.incidents and not (hung and not assisted):   # a hung trainer's log ends with no failure in it
            out.note += f"; last failure: {last_error(logs[-1])}" if not out.completed else ""
        if disk_skip and use_tmpfs:
            out.note += f"; disk fault skipped: {disk_skip}"
        if injector.error and not out.completed:
            out.note += f"; never reached: {injector.error.split(':')[0]} and later faults"
    finally:
        if proc is not None:
            common.stop(proc)  # only if still running
        if not disk_skip:
            keep_disk_evidence(loaded.out_dir, root)
            common.unmount(loaded.out_dir)
    return out


def process_stopped(pid: int) -> bool:
    """The process is stopped (state T: SIGSTOP), as `ps` shows an on-call human."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def last_error(log: Path) -> str:
    text = common.read_log(log).splitlines()
    errors = [line.strip() for line in text if "Error" in line or "error" in line]
    return (errors[-1][:110] if errors else (text[-1][:110] if text else "(no output)")).replace("|", "/")


def naive_incidents(logs: list[Path]) -> tuple[list[str], list]:
    """One incident per relaunch: what the previous attempt died of, and the steps it lost."""
    import re

    texts, steps = [], []
    for i, log in enumerate(logs[:-1]):
        figures = common.log_figures([log])
        nxt = common.read_log(logs[i + 1])
        resumed = re.search(r"(?:Resuming training from .*step-|toy: resuming from .*ckpt-)(\d+)", nxt)   # litgpt's, the toy's
        failed_at = figures.last_step or 0
        lost = max(0, failed_at - int(resumed.group(1))) if resumed else failed_at
        texts.append(f"restart after: {classify(log)}")
        steps.append(lost)
    if logs and not common.read_log(logs[-1]).count("Final evaluation"):
        texts.append(f"final attempt died: {classify(logs[-1])}")
        steps.append(None)
    return texts, steps


def classify(log: Path) -> str:
    text = common.read_log(log)
    for needle, label in (("can't allocate memory", "OOM"), ("non-finite", "NaN gradients"),
                          ("No space left", "disk full"), ("PytorchStreamReader", "corrupt checkpoint"),
                          ("central directory", "corrupt checkpoint"), ("OverflowError", "NaN (overflow)"),
                          ("toy cannot fit micro-batch", "OOM"), ("is corrupt (sha256 mismatch)", "corrupt checkpoint")):
        if needle in text:
            return label
    return "killed by a signal (no message)"
