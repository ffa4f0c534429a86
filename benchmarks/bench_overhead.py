"""Supervisor overhead: what `runbook watch` costs a training run in throughput, two ways.

    python benchmarks/bench_overhead.py            # 4 bare/watched pairs + 5 alternating-blocks runs (~22 min); prints the tables
    python benchmarks/bench_overhead.py --write    # the same, and writes its section of docs/benchmarks.md
    python benchmarks/bench_overhead.py --quick    # 2 pairs + 1 alternating run
    python benchmarks/bench_overhead.py --smoke    # the test suite's: 1 pair of 16 steps + 1 alternating run of 60 steps,
                                                   # on the toy trainer; <root>/results.json
    python benchmarks/bench_overhead.py --trainer toy   # the toy trainer (tests/toy_trainer/) instead of litgpt;
                                                   # never written to the docs

--smoke runs on the toy trainer (a real process, steps of 0.05 s, under a real `runbook watch` and bare):
what it checks is the harness (the pairs, the line clock, the CPU accounting read from unreaped processes,
the watcher paused and let run in blocks, the report), which is the trainer's only in the figures; the
toy's steps are paced sleeps, so its throughput ratio says nothing about the watcher's cost to a trainer
that keeps the cores busy. `--smoke --trainer litgpt` runs the smoke on litgpt (litgpt's data cache built
by the first run and copied into the others); the full mode trains litgpt.

1. Within one watched run, the watcher paused (SIGSTOP) and running (SIGCONT) in alternating blocks,
   each running block against the paused blocks either side of it (benchmarks/alternating_blocks.py).
   This decides the 2% goal: separate runs on this 2-vCPU VM differ by 20-35% in throughput on their
   own, inside one run the drift cancels.
2. Separate runs, bare and watched, interleaved pairs: the end-to-end picture (start-up, the data hash,
   sealing every checkpoint) and the CPU accounting.

The pairs' run is runbook drill's scratch run (16 x 64 tokens per optimizer step) made `--steps` long,
with a checkpoint and a validation every steps/8, so the window holds the watcher's real work (parsing
every progress line, sealing every checkpoint).

Bare: `litgpt pretrain --config <the litgpt config runbook's adapter generates>` with the environment
runbook gives its trainer (PYTHONUNBUFFERED=1, TORCHDYNAMO_DISABLE=1, TMPDIR=<out_dir>/.tmp, ...).
Watched: `runbook watch` on the same run config. Each run uses a fresh scratch project (both sides
prepare litgpt's data cache once); the order inside a pair alternates (bare first, then watched
first), so drift in the machine's load hits both alike.

Throughput: tokens between the first and the last optimizer-step progress line / the seconds between
them, with the lines timestamped by this script as they appear in the trainer's log (it polls every
20 ms on both sides). End to end: start of the command to its exit.

CPU accounting (robust to other load, unlike throughput): the watcher's own user+sys CPU seconds and
the trainer's, read from the exited processes before they are reaped (waitid WNOWAIT; the watched
trainer's CPU is the watcher's children time). On a machine whose cores the trainer keeps busy, the
watcher can take at most its own CPU time from the trainer: watcher CPU / (trainer CPU + watcher CPU)
bounds the throughput cost from above.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.alternating_blocks import Block, PairedResult, merge, paired_rates  # noqa: E402

SECTION = "Supervisor overhead"
TRAINER = "litgpt"        # --trainer toy (--smoke's default): tests/toy_trainer/ instead of litgpt
TOY_STEP_SECONDS = 0.05   # the toy's pace: a few step lines per 20 ms poll at most


@dataclass
class Sample:
    side: str
    tokens_per_s: float
    wall_s: float
    steps: int
    trainer_cpu_s: float
    train_window_s: float = 0.0                  # first -> last step line
    trainer_cpu_window_s: float | None = None    # trainer CPU in that window
    watcher_cpu_s: float | None = None
    watcher_cpu_window_s: float | None = None    # watcher CPU in that window
    watcher_rss_mb: float | None = None


def wait_unreaped(proc, sample=None) -> psutil._common.pcputimes:
    """Wait for proc's exit without reaping it, return its final CPU times, then reap it."""
    handle = psutil.Process(proc.pid)
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if sample:
            sample(handle)
        time.sleep(0.1)
    times = handle.cpu_times()
    proc.wait()
    return times


class LineClock(threading.Thread):
    """Timestamps optimizer-step progress lines as they appear in a log file, and reads the CPU seconds
    of the trainer (and the watcher) at each, so CPU is also counted over the training window only."""

    def __init__(self, log: Path, trainer_pid, watcher_pid: int | None = None):
        super().__init__(daemon=True)
        self.log, self.stamps, self.done = log, [], threading.Event()
        self.trainer_pid, self.watcher_pid = trainer_pid, watcher_pid   # trainer_pid: a callable (known late)
        self._handles: dict[int, psutil.Process] = {}

    def _cpu(self, pid: int | None) -> float | None:
        try:
            handle = self._handles.setdefault(pid, psutil.Process(pid))
            t = handle.cpu_times()
            return t.user + t.system
        except (psutil.Error, TypeError, ValueError):
            return None

    def run(self) -> None:
        offset, partial = 0, b""
        while True:
            finished = self.done.is_set()
            try:
                with open(self.log, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read()
            except FileNotFoundError:
                data = b""
            now = time.time()
            offset += len(data)
            *lines, partial = (partial + data).split(b"\n")
            steps = [step for line in lines for step, _loss, _ms, is_step in common.progress_lines(line.decode(errors="replace"))
                     if is_step]
            if steps:
                self.stamps.append((steps[-1], now, self._cpu(self.trainer_pid()), self._cpu(self.watcher_pid)))
            if finished:
                return
            time.sleep(0.02)


def window(stamps) -> tuple[float, float | None, float | None]:
    """Seconds between the first and the last step line, and the CPU seconds of trainer and watcher in between."""
    first, last = stamps[0], stamps[-1]
    def delta(k):
        return last[k] - first[k] if last[k] is not None and first[k] is not None else None
    return last[1] - first[1], delta(2), delta(3)


TOKENS_PER_STEP = 16 * 64   # runbook drill's scratch run: batch 16 x block 64


def run_settings(steps: int) -> dict:
    every = max(1, steps // 8)
    if TRAINER == "toy":   # a validation (announced, then silent for a step's time) and a checkpoint every steps/8
        return {**common.toy_settings(steps, TOY_STEP_SECONDS, save_interval=every, validate_interval=every,
                                      validate_seconds=TOY_STEP_SECONDS), "keep_last_k": 3}
    return {"max_tokens": steps * TOKENS_PER_STEP, "save_interval": every, "keep_last_k": 3,
            "trainer": {"eval_interval": every}}


def bare_launch(config: Path, launch_dir: Path):
    """The launch runbook's adapter makes of config, run here without runbook."""
    if TRAINER != "toy":
        return common.litgpt_launch(config, launch_dir)
    from engine.trainers import adapter_for

    return adapter_for(common.TOY_KIND).prepare_launch(common.load_run(config), launch_dir, None, "")


def throughput(stamps, tokens_per_step: int) -> tuple[float, int]:
    (s0, t0), (s1, t1) = stamps[0][:2], stamps[-1][:2]
    return (s1 - s0) * tokens_per_step / (t1 - t0), s1


SMOKE_DATA: list[Path] = []   # --smoke: [litgpt's data cache of the first run], copied into the later runs


def project(root: Path, settings: dict):
    """A run's scratch project. In --smoke mode (SMOKE_DATA started empty), the first run builds litgpt's
    data cache on its first launch, as every run of the full mode does, and the later runs start with a copy
    of it (a smoke checks the harness, not the end-to-end figures that include tokenizing)."""
    import shutil

    config = common.scratch_project(root, **settings)
    loaded = common.load_run(config)
    if SMOKE_DATA and common.seed_data(loaded.run_dir):   # the suite's smokes: an earlier benchmark's tokenized data
        SMOKE_DATA[0] = SMOKE_DATA[0] or loaded.run_dir / "data"
    elif SMOKE_DATA and SMOKE_DATA[0] is not None:
        shutil.rmtree(loaded.run_dir / "data", ignore_errors=True)
        shutil.copytree(SMOKE_DATA[0], loaded.run_dir / "data", symlinks=True)
    elif SMOKE_DATA:
        SMOKE_DATA[0] = loaded.run_dir / "data"   # built by this run's first launch
    return config, loaded


def run_bare(root: Path, settings: dict) -> Sample:
    config, loaded = project(root, settings)
    spec = bare_launch(config, loaded.run_dir / "launches" / "bare")
    log = loaded.run_dir / "logs" / "trainer-001.log"
    started = time.time()
    proc = common.start_bare(spec, log)
    clock = LineClock(log, lambda: proc.pid)
    clock.start()
    times = wait_unreaped(proc)
    wall = time.time() - started
    clock.done.set()
    clock.join()
    if proc.returncode != 0:
        raise RuntimeError(f"bare {TRAINER} exited {proc.returncode}: see {log}")
    tps, steps = throughput(clock.stamps, loaded.config.batch_size * loaded.config.model.block_size)
    span, trainer_cpu, _ = window(clock.stamps)
    # with its reaped children (litdata's preprocessing workers), as the watched trainer's count in the watcher's
    own = times.user + times.system + times.children_user + times.children_system
    return Sample("bare", tps, wall, steps, trainer_cpu_s=own, train_window_s=span,
                  trainer_cpu_window_s=trainer_cpu)


def run_watched(root: Path, settings: dict) -> Sample:
    config, loaded = project(root, settings)
    log = loaded.run_dir / "logs" / "trainer-001.log"
    started = time.time()
    proc = common.start_watch(config, root / "watch.log")
    pid_file = loaded.run_dir / "trainer.pid"
    clock = LineClock(log, lambda: int(pid_file.read_text()), proc.pid)
    clock.start()
    rss = [0.0]

    def sample(handle) -> None:
        try:
            rss[0] = max(rss[0], handle.memory_info().rss / 2**20)
        except psutil.Error:
            pass

    times = wait_unreaped(proc, sample)
    wall = time.time() - started
    clock.done.set()
    clock.join()
    if proc.returncode != 0:
        raise RuntimeError(f"runbook watch exited {proc.returncode}: see {root / 'watch.log'}")
    tps, steps = throughput(clock.stamps, loaded.config.batch_size * loaded.config.model.block_size)
    span, trainer_cpu, watcher_cpu = window(clock.stamps)
    return Sample("runbook watch", tps, wall, steps, trainer_cpu_s=times.children_user + times.children_system,
                  train_window_s=span, trainer_cpu_window_s=trainer_cpu, watcher_cpu_s=times.user + times.system,
                  watcher_cpu_window_s=watcher_cpu, watcher_rss_mb=rss[0])


def run_alternating(root: Path, settings: dict, block_s: float) -> PairedResult:
    """One watched run whose watcher is paused (SIGSTOP) and let run (SIGCONT) in alternating blocks
    (benchmarks/alternating_blocks.py says why); returns the paired step rates."""
    config, loaded = project(root, settings)
    total_steps = loaded.config.max_tokens // (loaded.config.batch_size * loaded.config.model.block_size)
    log = loaded.run_dir / "logs" / "trainer-001.log"
    proc = common.start_watch(config, root / "watch.log")
    pid_file = loaded.run_dir / "trainer.pid"
    clock = LineClock(log, lambda: int(pid_file.read_text()))
    clock.start()
    blocks: list[Block] = []
    try:
        while not clock.stamps and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(block_s)  # past the first steps
        state = "paused"
        # stop a few blocks before the end, so the last block still has step lines after it
        while proc.poll() is None and clock.stamps[-1][0] < 0.9 * total_steps:
            if state == "paused":
                os.kill(proc.pid, signal.SIGSTOP)
            start = time.time()
            time.sleep(block_s)
            end = time.time()
            if state == "paused":
                os.kill(proc.pid, signal.SIGCONT)
            blocks.append(Block(state, start, end))
            state = "running" if state == "paused" else "paused"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
    rc = proc.wait()
    clock.done.set()
    clock.join()
    if rc != 0:
        raise RuntimeError(f"runbook watch exited {rc}: see {root / 'watch.log'}")
    return paired_rates([(step, when) for step, when, *_ in clock.stamps], blocks)


def alternating_settings(steps: int) -> dict:
    """No checkpoint or validation inside the window: each stalls the trainer in one block at random,
    noise the pairing cannot cancel (the sealing that follows a save is in the pairs and the CPU share)."""
    if TRAINER == "toy":
        return {**common.toy_settings(steps, TOY_STEP_SECONDS, save_interval=steps), "keep_last_k": 3}
    return {"max_tokens": steps * TOKENS_PER_STEP, "save_interval": steps, "keep_last_k": 3,
            "trainer": {"eval_interval": steps}}


def measure_pairs(args, repeats: int) -> list[tuple[Sample, Sample, str]]:
    pairs = []
    for i in range(repeats):
        order = (run_bare, run_watched) if i % 2 == 0 else (run_watched, run_bare)
        got = {}
        for fn in order:
            sample = fn(args.root / f"{i}-{fn.__name__}", run_settings(args.steps))
            got[sample.side] = sample
            print(f"  pair {i + 1} {sample.side}: {sample.tokens_per_s:,.0f} tokens/s, {sample.wall_s:.1f} s end to end, "
                  f"trainer CPU {sample.trainer_cpu_s:.1f} s"
                  + (f", watcher CPU {sample.watcher_cpu_s:.2f} s" if sample.watcher_cpu_s is not None else "")
                  + f" (load {common.load_average()})", flush=True)
        pairs.append((got["bare"], got["runbook watch"], common.load_average()))
    return pairs


def share(w: Sample) -> float:
    """The watcher's share of trainer + watcher CPU over the training window."""
    return w.watcher_cpu_window_s / (w.trainer_cpu_window_s + w.watcher_cpu_window_s)


def per_min(w: Sample) -> float:
    return 60 * w.watcher_cpu_window_s / w.train_window_s


def pairs_report(pairs) -> tuple[str, str]:
    """The bare/watched pairs' table and what they show."""
    med = statistics.median
    rows = []
    for i, (bare, watched, load) in enumerate(pairs, 1):
        first = "bare" if i % 2 == 1 else "watched"
        rows.append([f"{i} ({first} first)", f"{bare.tokens_per_s:,.0f}", f"{watched.tokens_per_s:,.0f}",
                     f"{watched.tokens_per_s / bare.tokens_per_s:.3f}", f"{bare.wall_s:.1f}", f"{watched.wall_s:.1f}",
                     f"{bare.trainer_cpu_s:.1f}", f"{watched.trainer_cpu_s:.1f}", f"{watched.watcher_cpu_s:.2f}",
                     f"{per_min(watched):.2f}", f"{100 * share(watched):.2f}%",
                     f"{watched.watcher_rss_mb:.0f}", load])
    ratios = [w.tokens_per_s / b.tokens_per_s for b, w, _ in pairs]
    bare_tps = [b.tokens_per_s for b, _, _ in pairs]
    shares = [share(w) for _, w, _ in pairs]
    cpu_per_min = [per_min(w) for _, w, _ in pairs]
    rows.append(["**median**", f"{med(bare_tps):,.0f}", f"{med(w.tokens_per_s for _, w, _ in pairs):,.0f}",
                 f"**{med(ratios):.3f}**", f"{med(b.wall_s for b, _, _ in pairs):.1f}", f"{med(w.wall_s for _, w, _ in pairs):.1f}",
                 f"{med(b.trainer_cpu_s for b, _, _ in pairs):.1f}", f"{med(w.trainer_cpu_s for _, w, _ in pairs):.1f}",
                 f"{med(w.watcher_cpu_s for _, w, _ in pairs):.2f}", f"{med(cpu_per_min):.2f}", f"**{100 * med(shares):.2f}%**",
                 f"{med(w.watcher_rss_mb for _, w, _ in pairs):.0f}", ""])
    headers = ["pair", "bare tokens/s", "watched tokens/s", "watched / bare", "bare wall s", "watched wall s",
               "bare trainer CPU s", "watched trainer CPU s", "watcher CPU s (whole run)",
               "watcher CPU s per min of training", "watcher share of CPU while training", "watcher RSS MB",
               "load avg after the pair"]
    text = (f"Separate runs: median watched/bare throughput ratio {med(ratios):.3f}, pairs {min(ratios):.3f}-{max(ratios):.3f}; "
            f"but the bare runs alone range over {min(bare_tps):,.0f}-{max(bare_tps):,.0f} tokens/s "
            f"({100 * (max(bare_tps) / min(bare_tps) - 1):.0f}%), so separate runs cannot show a 2% cost on this machine. "
            f"CPU accounting: while the trainer trained, the watcher's CPU time was a median {100 * med(shares):.2f}% of the "
            f"trainer's and its own together (at most {100 * max(shares):.2f}%), the most it can take from a trainer that keeps "
            f"every core busy; it used a median {med(cpu_per_min):.2f} CPU-seconds per minute of training "
            f"({100 * med(cpu_per_min) / 60:.1f}% of one core) and {med(w.watcher_cpu_s for _, w, _ in pairs):.1f} CPU-seconds "
            f"over a whole run (start-up, data hash and the final sealing included). End to end (start to exit) the watched run "
            f"took a median {med(w.wall_s / b.wall_s for b, w, _ in pairs):.3f} x the bare one's wall time.")
    return common.table(headers, rows), text


def alternating_report(results: list[PairedResult]) -> tuple[str, str, bool]:
    """The alternating-blocks runs' table, the verdict on the 2% goal, and whether it is met."""
    rows = []
    for i, r in enumerate(results, 1):
        low, high = r.ci95
        rows.append([str(i), str(len(r.ratios)), f"{r.paused_rate:.2f}", f"{r.running_rate:.2f}", f"{r.pooled_ratio:.4f}",
                     f"{r.median_ratio:.4f}", f"{r.mean_ratio:.4f}", f"{low:.4f}-{high:.4f}"])
    every = merge(results)
    low, high = every.ci95
    rows.append(["**all**", str(len(every.ratios)), f"{every.paused_rate:.2f}", f"{every.running_rate:.2f}",
                 f"{every.pooled_ratio:.4f}", f"{every.median_ratio:.4f}", f"**{every.mean_ratio:.4f}**",
                 f"**{low:.4f}-{high:.4f}**"])
    headers = ["run", "running blocks measured", "paused steps/s", "running steps/s", "pooled running / paused",
               "median ratio", "mean ratio", "95% interval of the mean"]
    met = low >= 0.98
    resolved = high - low <= 0.04
    verdict = (f"Goal (issue 7): runbook costs under 2% of throughput. Within-run A-B-A blocks: mean running/paused step "
               f"rate {every.mean_ratio:.4f}, 95% interval {low:.4f}-{high:.4f} over {len(every.ratios)} running blocks: "
               + ("**met** (the whole interval is above 0.98)" if met else
                  "**missed** (the interval lies below 0.98)" if high < 0.98 else
                  "**not resolved** (the interval reaches below 0.98; more blocks would narrow it)" if not resolved else
                  "**not met at 95%** (the interval reaches below 0.98)")
               + ".")
    return common.table(headers, rows), verdict, met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 pairs, 1 alternating run")
    parser.add_argument("--steps", type=int, default=400, help="optimizer steps per run of a pair (default 400)")
    parser.add_argument("--repeats", type=int, default=None, help="pairs (bare + watched); default 4, --quick 2")
    parser.add_argument("--alt-steps", type=int, default=4000, help="optimizer steps of an alternating-blocks run")
    parser.add_argument("--alt-runs", type=int, default=None, help="alternating-blocks runs (default 5, --quick 1)")
    parser.add_argument("--block-s", type=float, default=1.5, help="seconds per paused / running block")
    parser.add_argument("--root", type=Path, default=Path("/tmp/runbook-bench-overhead"))
    common.trainer_flag(parser)
    common.docs_flags(parser, "1 pair of 16-step runs, 1 alternating run of 60 steps in 0.5 s blocks, on the toy "
                              "trainer unless --trainer litgpt")
    args = parser.parse_args()
    global TRAINER
    TRAINER = common.chosen_trainer(args)
    if args.smoke:
        args.steps, args.repeats, args.alt_steps, args.alt_runs, args.block_s = 16, 1, 60, 1, 0.5
        if TRAINER == "litgpt":
            SMOKE_DATA.append(None)   # the first run's data cache is copied into the others (project())
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 4)
    alt_runs = args.alt_runs if args.alt_runs is not None else (1 if args.quick else 5)
    load_start = common.load_average()
    t0 = time.time()

    pairs = measure_pairs(args, repeats)
    results = []
    for i in range(alt_runs):
        result = run_alternating(args.root / f"alternating-{i}", alternating_settings(args.alt_steps), args.block_s)
        print(f"  alternating run {i + 1}: {len(result.ratios)} running blocks, mean ratio {result.mean_ratio:.4f}, "
              f"pooled {result.pooled_ratio:.4f} (load {common.load_average()})", flush=True)
        results.append(result)
    elapsed = time.time() - t0

    args.root.mkdir(parents=True, exist_ok=True)
    (args.root / "results.json").write_text(json.dumps({
        "pairs": [{"bare": asdict(b), "watched": asdict(w), "load": load} for b, w, load in pairs],
        "alternating": [{"ratios": r.ratios, "paused_rate": r.paused_rate, "running_rate": r.running_rate} for r in results],
        "trainer": TRAINER,
    }, indent=1))
    measured = [r for r in results if r.ratios]   # a short run (--smoke) may hold no whole paused-running-paused triple
    pairs_table, pairs_text = pairs_report(pairs) if pairs else ("", "")
    alt_table, verdict, _ = alternating_report(measured) if measured else ("", "No alternating-blocks run measured.", False)
    print("\n" + pairs_table + "\n\n" + pairs_text + "\n\n" + alt_table + "\n\n" + verdict)
    if not common.should_write(args):
        return 0
    body = f"""Command: `{common.command_line()}` ({'quick' if args.quick else 'default'} mode, {elapsed / 60:.1f} min in all).

Machine: {common.machine(load_start)}. Nothing else ran on it but the VM's own housekeeping (the load
average after each pair is in the table).

**Within one run, watcher paused vs running** (the measurement that decides the goal). One `runbook watch`
run of {args.alt_steps} optimizer steps of 16 x 64 tokens (no checkpoint or validation inside the window: each
stalls the trainer in one block at random), {alt_runs} time(s); once training runs, the benchmark pauses
the watcher (SIGSTOP) and lets it run (SIGCONT) in alternating {args.block_s:g} s blocks, and compares each
running block's step rate with the mean of the paused blocks on either side (benchmarks/alternating_blocks.py).
The machine's drift, which makes separate runs differ by 20-35%, is slow against a block and cancels; the
comparison is conservative, since what the watcher could not do while paused (reading the lines it missed)
it does in the next running block. Step rates come from the trainer's step lines, timestamped by the
benchmark as they appear (20 ms polling), interpolated at the block edges.

{alt_table}

{verdict}

**Separate runs, bare vs watched** ({repeats} interleaved pairs of {args.steps}-step runs, a checkpoint and a
validation every {max(1, args.steps // 8)} steps): bare is `litgpt pretrain --config <the config runbook's adapter generates>` with
runbook's trainer environment (PYTHONUNBUFFERED=1, TORCHDYNAMO_DISABLE=1, TMPDIR on the checkpoint filesystem);
watched is `runbook watch` on the same run config (poll interval 0.2 s), so the watcher's sealing of every
checkpoint is in the window. Throughput is measured between the first and the last optimizer-step line;
end-to-end wall time includes start-up (runbook adds its config and data checks, the data hash, and sealing
every checkpoint before it reports completion). CPU seconds are user+sys of each process (psutil): for the
whole run read at its exit (on the unreaped process, with its reaped children such as litdata's preprocessing
workers; the watched trainer's are the watcher's children time), and over the training window read at the
first and the last step line. The trainer's CPU time itself swings with the machine (OpenMP threads spin
while they wait for a core), as the two trainer CPU columns show.

{pairs_table}

{pairs_text}"""
    common.write_section(SECTION, body)
    print(f"\nwrote the '{SECTION}' section of {common.DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
