"""Supervisor overhead: the same run bare (`litgpt pretrain`) and under `runbook watch`, interleaved.

    python benchmarks/bench_overhead.py            # the repo's run (100 steps), 3 pairs; writes docs
    python benchmarks/bench_overhead.py --quick    # 40 steps, 3 pairs; docs untouched unless --write

Bare: `litgpt pretrain --config <the litgpt config runbook's adapter generates>` with the environment
runbook gives its trainer (PYTHONUNBUFFERED=1, TORCHDYNAMO_DISABLE=1, TMPDIR=<out_dir>/.tmp, ...).
Watched: `runbook watch` on the same run config. Each repeat uses a fresh scratch project on both
sides (both prepare the data cache once); the order inside a pair alternates (bare first, then
watched first), so drift in the machine's load hits both alike.

Throughput: tokens between the first and the last optimizer-step progress line / the seconds between
them, with the lines timestamped by this script as they appear in the trainer's log (it polls every
20 ms on both sides). End to end: start of the command to its exit. Watcher CPU: psutil user+sys of
the `runbook watch` process itself (children excluded), read from the exited process before it is
reaped (waitid WNOWAIT), so the whole run is counted; per minute of the watcher's wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from benchmarks import common  # noqa: E402

SECTION = "Supervisor overhead"


@dataclass
class Sample:
    side: str
    tokens_per_s: float
    wall_s: float
    steps: int
    watcher_cpu_s: float | None = None
    watcher_rss_mb: float | None = None


class LineClock(threading.Thread):
    """Timestamps optimizer-step progress lines as they appear in a log file."""

    def __init__(self, log: Path):
        super().__init__(daemon=True)
        self.log, self.stamps, self.done = log, [], threading.Event()

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
            for line in lines:
                m = common.PROGRESS.match(line.decode(errors="replace"))
                if m and m.group(5):
                    self.stamps.append((int(m.group(2)), now))
            if finished:
                return
            time.sleep(0.02)


def repo_run() -> dict:
    cfg = common.loaded(common.RUN_CONFIG).config
    return {"max_tokens": cfg.max_tokens, "save_interval": cfg.save_interval, "keep_last_k": cfg.keep_last_k}


def throughput(stamps, tokens_per_step: int) -> tuple[float, int]:
    (s0, t0), (s1, t1) = stamps[0], stamps[-1]
    return (s1 - s0) * tokens_per_step / (t1 - t0), s1


def run_bare(root: Path, settings: dict) -> Sample:
    config = common.scratch_project(root, **settings)
    cfg = common.loaded(config)
    spec = common.litgpt_launch(config, cfg.run_dir / "launches" / "bare")
    log = cfg.run_dir / "logs" / "trainer-001.log"
    clock = LineClock(log)
    clock.start()
    started = time.time()
    proc = common.start_bare(spec, log)
    code = proc.wait()
    wall = time.time() - started
    clock.done.set()
    clock.join()
    if code != 0:
        raise RuntimeError(f"bare litgpt exited {code}: see {log}")
    tps, steps = throughput(clock.stamps, cfg.config.batch_size * cfg.config.model.block_size)
    return Sample("bare", tps, wall, steps)


def run_watched(root: Path, settings: dict) -> Sample:
    config = common.scratch_project(root, **settings)
    cfg = common.loaded(config)
    log = cfg.run_dir / "logs" / "trainer-001.log"
    clock = LineClock(log)
    clock.start()
    started = time.time()
    proc = common.start_watch(config, root / "watch.log")
    watcher = psutil.Process(proc.pid)
    rss = 0.0
    # Wait for the exit without reaping (WNOWAIT): the zombie still holds its final CPU times.
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        try:
            rss = max(rss, watcher.memory_info().rss / 2**20)
        except psutil.Error:
            pass
        time.sleep(0.25)
    wall = time.time() - started
    times = watcher.cpu_times()
    cpu = times.user + times.system  # the watcher's own; its children (the trainer) are counted apart
    proc.wait()
    clock.done.set()
    clock.join()
    if proc.returncode != 0:
        raise RuntimeError(f"runbook watch exited {proc.returncode}: see {root / 'watch.log'}")
    tps, steps = throughput(clock.stamps, cfg.config.batch_size * cfg.config.model.block_size)
    return Sample("runbook watch", tps, wall, steps, watcher_cpu_s=cpu, watcher_rss_mb=rss)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40-step run; docs untouched unless --write")
    parser.add_argument("--repeats", type=int, default=3, help="pairs (bare + watched)")
    parser.add_argument("--root", type=Path, default=Path("/tmp/runbook-bench-overhead"))
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    settings = {} if args.quick else repo_run()  # quick: runbook drill's 40-step run
    load_start = common.load_average()
    t0 = time.time()
    pairs = []
    for i in range(args.repeats):
        order = (run_bare, run_watched) if i % 2 == 0 else (run_watched, run_bare)
        got = {}
        for fn in order:
            sample = fn(args.root / f"{i}-{fn.__name__}", settings)
            got[sample.side] = sample
            print(f"  pair {i + 1} {sample.side}: {sample.tokens_per_s:,.0f} tokens/s, {sample.wall_s:.1f} s end to end"
                  + (f", watcher CPU {sample.watcher_cpu_s:.2f} s" if sample.watcher_cpu_s is not None else "")
                  + f" (load {common.load_average()})", flush=True)
        pairs.append((got["bare"], got["runbook watch"], common.load_average()))
    elapsed = time.time() - t0

    rows = []
    for i, (bare, watched, load) in enumerate(pairs, 1):
        first = "bare" if i % 2 == 1 else "watched"
        rows.append([f"{i} ({first} first)", f"{bare.tokens_per_s:,.0f}", f"{watched.tokens_per_s:,.0f}",
                     f"{watched.tokens_per_s / bare.tokens_per_s:.3f}", f"{bare.wall_s:.1f}", f"{watched.wall_s:.1f}",
                     f"{watched.watcher_cpu_s:.2f}", f"{60 * watched.watcher_cpu_s / watched.wall_s:.2f}",
                     f"{watched.watcher_rss_mb:.0f}", load])
    ratios = [w.tokens_per_s / b.tokens_per_s for b, w, _ in pairs]
    wall_ratios = [w.wall_s / b.wall_s for b, w, _ in pairs]
    cpu_per_min = [60 * w.watcher_cpu_s / w.wall_s for _, w, _ in pairs]
    median_ratio = statistics.median(ratios)
    rows.append(["**median**", f"{statistics.median(b.tokens_per_s for b, _, _ in pairs):,.0f}",
                 f"{statistics.median(w.tokens_per_s for _, w, _ in pairs):,.0f}", f"**{median_ratio:.3f}**",
                 f"{statistics.median(b.wall_s for b, _, _ in pairs):.1f}", f"{statistics.median(w.wall_s for _, w, _ in pairs):.1f}",
                 f"{statistics.median(w.watcher_cpu_s for _, w, _ in pairs):.2f}", f"{statistics.median(cpu_per_min):.2f}",
                 f"{statistics.median(w.watcher_rss_mb for _, w, _ in pairs):.0f}", ""])
    headers = ["pair", "bare tokens/s", "watched tokens/s", "watched / bare", "bare wall s", "watched wall s",
               "watcher CPU s", "watcher CPU s per min", "watcher RSS MB", "load avg after the pair"]
    text = common.table(headers, rows)
    cost = 1 - median_ratio
    verdict = (f"Goal (issue 7): runbook costs under 2% of throughput. Median throughput ratio {median_ratio:.3f} "
               f"(cost {100 * cost:.1f}%; the pairs range {min(ratios):.3f}-{max(ratios):.3f}): "
               + ("met." if cost < 0.02 else "**missed**" if min(ratios) < 0.98 and cost >= 0.02 else "not shown"))
    print("\n" + text + "\n\n" + verdict)
    if args.quick and not args.write:
        print("\n(--quick: docs/benchmarks.md not written; add --write)")
        return 0
    steps = pairs[0][0].steps
    body = f"""Command: `{common.command_line()}` ({'quick' if args.quick else 'default'} mode: {steps} optimizer steps of
16 x 64 tokens per run, {args.repeats} interleaved pairs, {elapsed / 60:.1f} min in all).

Machine: {common.machine(load_start)}. Other jobs shared the 2 cores: compare within a pair.

Bare is `litgpt pretrain --config <the config runbook's adapter generates>` with runbook's trainer
environment (PYTHONUNBUFFERED=1, TORCHDYNAMO_DISABLE=1, TMPDIR on the checkpoint filesystem); watched is
`runbook watch` on the same run config (poll interval 0.2 s). Throughput is measured between the first
and the last optimizer-step line of the trainer's log (timestamped by the benchmark as they appear, on
both sides alike), so start-up is excluded; end-to-end wall time includes it (runbook adds its
config and data checks, the data hash, and sealing every checkpoint before it reports completion).
Watcher CPU is the `runbook watch` process's own user+sys time (psutil; the trainer is excluded).

{text}

{verdict} The end-to-end wall ratio (watched / bare) has median {statistics.median(wall_ratios):.3f}.
The watcher used a median {statistics.median(cpu_per_min):.2f} CPU-seconds per minute of its run
({100 * statistics.median(cpu_per_min) / 60:.1f}% of one core)."""
    common.write_section(SECTION, body)
    print(f"\nwrote the '{SECTION}' section of {common.DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
