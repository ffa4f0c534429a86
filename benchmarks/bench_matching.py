"""Matching throughput: state observations per second through `engine.language.matcher.decide`.

    python benchmarks/bench_matching.py            # full run (about a minute), prints the figures
    python benchmarks/bench_matching.py --write    # the same, and updates docs/benchmarks.md
    python benchmarks/bench_matching.py --quick    # smaller figures
    python benchmarks/bench_matching.py --smoke    # the test suite's: 100 snapshots, 1 round, a 10,000-line log

Three figures:
1. decide() with the shipped playbooks/ on realistic snapshots of a healthy run (one litgpt progress
   line as new_lines, a tail of 200 lines, every metric known): the issue's goal is >= 50,000/s.
2. The same with 200 generated playbooks of every clause kind (regexes over new lines and over the
   tail, metric comparisons, expressions, all/any/not).
3. Replaying a one-million-line litgpt log: every line parsed with LitGPTAdapter.parse_line into the
   observer's MetricTracker, and one observation (a StateSnapshot built as the observer builds it,
   then decide) per batch of 10 lines, i.e. a 0.2 s poll of a trainer printing 50 lines/s.
   Snapshots are prebuilt for 1 and 2 so those figures measure matching only (the median of five
   rounds); 3 is end to end.
Single process, single thread: the figures are per core. Times are the process's CPU time
(time.process_time), so other load on a shared machine does not distort them.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import re
import statistics
import sys
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.observe.throughput import ProgressMeaning
from engine.language.matcher import AttemptHistory, MatchMemory, decide  # noqa: E402
from engine.observe.observer import MetricTracker  # noqa: E402
from engine.language.playbook import build_playbook  # noqa: E402
from engine.language.loader import load_playbooks  # noqa: E402
from engine.core.state import CheckpointStatus, DiskStatus, StateSnapshot, TrainerStatus  # noqa: E402
from engine.trainers.litgpt.adapter import LitGPTAdapter  # noqa: E402
from engine.core.config import RunConfig  # noqa: E402
from benchmarks.common import DOCS, write_section  # noqa: E402

TAIL = 200
REPLAY_BATCH = 10
TOKENS_PER_ITER = 4 * 64
SECTION = "Matching throughput"


def litgpt_log(n_lines: int, seed: int = 0) -> list[str]:
    """A realistic `litgpt pretrain` stdout: progress every iteration (accumulation 4), a validation
    line every 20 optimizer steps, a checkpoint save every 50."""
    rng = random.Random(seed)
    lines: list[str] = []
    iter_num, step = 0, 0
    while len(lines) < n_lines:
        iter_num += 1
        is_step = iter_num % 4 == 0
        step += is_step
        # a decaying loss curve with noise around it (a random walk would drift into a real "spike")
        loss = 1.8 + 8.7 * math.exp(-iter_num / 20_000) + rng.gauss(0, 0.03)
        remaining = max(0, n_lines - iter_num) * 0.09
        lines.append(
            f"Epoch 1 | iter {iter_num} step {step} | loss train: {loss:.3f}, val: n/a | iter time: "
            f"{rng.uniform(80, 110):.2f} ms{' (step)' if is_step else ''} remaining time: "
            f"{int(remaining // 3600)}:{int(remaining % 3600 // 60):02d}:{int(remaining % 60):02d}"
        )
        if is_step and step % 20 == 0:
            lines.append(f"iter {iter_num}: val loss {loss + 0.1:.4f}, val time: {rng.uniform(5, 9):.2f} ms")
        if is_step and step % 50 == 0:
            lines.append(f"Saving checkpoint to 'checkpoints/pretrain/step-{step:08d}/lit_model.pth'")
    return lines[:n_lines]


class LogReplayer:
    """What engine.observe.observer.Observer does per poll, minus the file and the disk syscall."""

    def __init__(self):
        self.adapter = LitGPTAdapter()
        self.tracker = MetricTracker(ProgressMeaning(TOKENS_PER_ITER))
        self.tail: deque[str] = deque(maxlen=TAIL)
        self.observation = 0
        self.trainer = TrainerStatus(pid=4242, alive=True, launches=1)
        self.disk = DiskStatus(free_bytes=200 * 2**30, total_bytes=500 * 2**30)
        self.checkpoints = CheckpointStatus(count=3, newest_step=100, newest_verified_step=100, last_size_bytes=2_000_000)

    def snapshot(self, new_lines: list[str], now: float) -> StateSnapshot:
        for line in new_lines:
            self.tail.append(line)
            event = self.adapter.parse_line(line)
            if event is not None:
                self.tracker.on_event(event, now)
        self.observation += 1
        return StateSnapshot(
            observation=self.observation, time=now, trainer=self.trainer, metrics=self.tracker.metrics(),
            seconds_since_progress=0.05, new_lines=new_lines, tail=list(self.tail), disk=self.disk,
            checkpoints=self.checkpoints,
        )


def healthy_snapshots(count: int) -> list[StateSnapshot]:
    replayer = LogReplayer()
    lines = litgpt_log(count + TAIL)
    for index in range(TAIL):  # fill the tail first
        replayer.snapshot([lines[index]], index * 0.1)
    return [replayer.snapshot([lines[TAIL + i]], (TAIL + i) * 0.1) for i in range(count)]


def generated_playbooks(count: int, seed: int = 1) -> list:
    """`count` playbooks over every clause kind; like real rules, almost none match a healthy run."""
    rng = random.Random(seed)
    words = ["CUDA out of memory", "NCCL error", "Traceback", "No space left", "Segmentation fault",
             "loss is nan", "Killed", "ECC error", "Timeout", "connection reset"]

    def leaf(i: int) -> dict:
        kind = i % 9
        word = re.escape(rng.choice(words)) + rf"( \w+)?\s*#{i}"
        if kind == 0:
            return {"log": {"pattern": word, "scope": "new"}}
        if kind == 1:
            return {"log": {"pattern": word, "scope": "tail", "ignore_case": bool(i % 2)}}
        if kind == 2:
            return {"metric": {"name": rng.choice(["loss", "val_loss", "tokens_per_sec"]), "op": ">", "value": 1e6 + i}}
        if kind == 3:
            return {"metric": {"name": "loss", "op": rng.choice(["not_finite", "ratio_to_median_above"]), "value": 5}}
        if kind == 4:
            return {"exit": {"codes": [i % 100 + 1], "signals": ["SIGKILL"]}}
        if kind == 5:
            return {"stalled": {"seconds": 60 + i}}
        if kind == 6:
            return {"disk": {"free_percent_below": 1 + i % 5}}
        if kind == 7:
            return {"throughput": {"below_baseline_fraction": 0.1 + (i % 5) / 10}}
        return {"expr": f"state.metrics.loss is not none and state.metrics.loss > {20 + i} * (state.metrics.loss_median or 1)"}

    playbooks = []
    for i in range(count):
        shape = i % 4
        if shape == 0:
            match = leaf(i)
        elif shape == 1:
            match = {"any": [leaf(i), leaf(i + 1)]}
        elif shape == 2:
            match = {"all": [leaf(i), {"not": leaf(i + 2)}]}
        else:
            match = {"all": [{"any": [leaf(i), leaf(i + 3)]}, leaf(i + 5)]}
        data = {
            "name": f"generated-{i:03d}", "description": "generated", "priority": rng.randint(0, 100),
            "match": match, "for": {"observations": 1 + i % 3}, "limits": {"max_attempts": 2, "cooldown": "1m"},
            "actions": [{"record": {"note": "generated"}}, {"stop": {}}, {"resume": {"from": "newest_verified"}}],
        }
        playbooks.append(build_playbook(data))
    return playbooks


def observations_per_second(playbooks, snapshots, config, min_seconds: float, rounds: int = 5) -> float:
    """The median of `rounds` measurements of min_seconds/rounds each (one busy moment does not count)."""
    rates = []
    memory, history = MatchMemory(), AttemptHistory()
    for _ in range(rounds):
        done, start = 0, time.process_time()
        while True:
            for snapshot in snapshots:
                outcome = decide(snapshot, config, playbooks, memory, history)
                memory = outcome.memory
            done += len(snapshots)
            elapsed = time.process_time() - start
            if elapsed >= min_seconds / rounds:
                rates.append(done / elapsed)
                break
    return statistics.median(rates)


def replay(lines: list[str], playbooks, config, batch: int) -> tuple[float, int]:
    replayer = LogReplayer()
    memory, history = MatchMemory(), AttemptHistory()
    decisions = 0
    start = time.process_time()
    for index in range(0, len(lines), batch):
        snapshot = replayer.snapshot(lines[index:index + batch], index * 0.02)
        outcome = decide(snapshot, config, playbooks, memory, history)
        memory = outcome.memory
        decisions += outcome.decision is not None
    elapsed = time.process_time() - start
    if decisions:
        raise SystemExit(f"a healthy log produced {decisions} decision(s): the benchmark is not measuring a healthy run")
    return elapsed, -(-len(lines) // batch)


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark; returns the figures (the smoke test calls it in-process)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs, a 100,000-line log")
    parser.add_argument("--no-docs", action="store_true", help="(the default now; kept for old command lines)")
    from benchmarks import common

    common.docs_flags(parser, "100 snapshots, 1 round of 0.1 s per figure, a 10,000-line log")
    args = parser.parse_args(argv)
    seconds, n_lines = (0.1, 10_000) if args.smoke else (0.5, 100_000) if args.quick else (3.0, 1_000_000)
    load = os.getloadavg()[0]  # CPU time still suffers when other processes share the cores

    config = RunConfig()
    shipped = load_playbooks([ROOT / "playbooks"])
    generated = generated_playbooks(200)
    snapshots = healthy_snapshots(100 if args.smoke else 2000)
    rounds = 1 if args.smoke else 5
    rows = []
    shipped_rate = observations_per_second(shipped, snapshots, config, seconds, rounds)
    rows.append((f"decide, shipped playbooks ({len(shipped)})", f"{shipped_rate:,.0f} obs/s"))
    generated_rate = observations_per_second(generated, snapshots[:500], config, seconds, rounds)
    rows.append((f"decide, generated playbooks ({len(generated)})", f"{generated_rate:,.0f} obs/s"))
    lines = litgpt_log(n_lines)
    elapsed, observations = replay(lines, shipped, config, REPLAY_BATCH)
    rows.append((f"replay {n_lines:,} log lines, shipped playbooks, 1 observation / {REPLAY_BATCH} lines",
                 f"{elapsed:.1f} s ({n_lines / elapsed:,.0f} lines/s, {observations / elapsed:,.0f} obs/s)"))

    machine = (f"{platform.machine()}, nproc {os.cpu_count()}, Python {platform.python_version()}, "
               f"{platform.system()}, load average {load:.1f} at the start")
    width = max(len(r[0]) for r in rows)
    table = "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
    print(f"machine: {machine}\n{table}")
    verdict = "met" if shipped_rate >= 50_000 else "NOT met"
    print(f"goal >= 50,000 obs/s with the shipped set on one core: {verdict}")
    figures = {"shipped_playbooks": len(shipped), "generated_playbooks": len(generated), "shipped_obs_per_s": shipped_rate,
               "generated_obs_per_s": generated_rate, "replay_lines": n_lines, "replay_s": elapsed,
               "replay_observations": observations, "rows": rows}
    if args.no_docs or not common.should_write(args):
        return figures
    md_rows = "\n".join(f"| {name} | {value} |" for name, value in rows)
    write_section(
        SECTION,
        "Command: `python benchmarks/bench_matching.py` (see its docstring for what each figure measures). "
        "One process, one thread; CPU time of the process.\n\n"
        f"Machine: {machine}.\n\n"
        f"| measurement | result |\n|---|---|\n{md_rows}\n\n"
        f"Goal (issue 3): at least 50,000 observations/s with the shipped playbooks on one core: {verdict}.\n\n"
        "Found with cProfile and removed from the hot path, with unchanged decisions (tests compare the "
        "fast paths with the plain ones): re-sorting the playbooks at every observation (now once per "
        "set), searching the 200-line tail again for every `scope: tail` clause (now each line once per "
        "pattern set, `engine/language/tail_index.py`), jinja's per-call template context and attribute "
        "checks for expressions (now plain closures making the same sandbox calls for the common "
        "expression shapes, `engine/expr/direct_eval.py`, a direct read of model fields, and one evaluation "
        "per observation of a condition several playbooks share), generator overhead in `all`/`any`, "
        "and two needless calls in the most common clause (`exit`). What is left is mostly one Python "
        "call per clause; the figure moves with the load of the machine (on this shared 2-vCPU machine "
        "from about 40,000 to 90,000 obs/s between runs).\n\n"
    )
    print(f"updated {DOCS.relative_to(ROOT)}")
    return figures


if __name__ == "__main__":
    main()
    sys.exit(0)
