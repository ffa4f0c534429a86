"""False alarms: undisturbed runs of the embedded default under CPU contention, counting spurious incidents.

    python benchmarks/bench_false_alarms.py              # 20 runs; prints per-run incidents and the total
    python benchmarks/bench_false_alarms.py --runs 5     # fewer runs
    python benchmarks/bench_false_alarms.py --max-minutes 30   # no new run starts after 30 min (the report says how many ran)
    python benchmarks/bench_false_alarms.py --write      # the same, and writes its section of docs/benchmarks.md
    python benchmarks/bench_false_alarms.py --smoke      # the test suite's: 1 run on the toy trainer; <root>/results.json
    python benchmarks/bench_false_alarms.py --trainer toy   # the toy trainer instead of litgpt (never written to the docs)

What is measured is the watcher's judgement beside busy loops, so --smoke runs on the toy trainer
(tests/toy_trainer/: a real process, 12 steps of 0.25 s, a checkpoint every 10, under a real `runbook
watch`); `--smoke --trainer litgpt` runs it on litgpt. The full mode trains litgpt:

Each run is `runbook watch` on a scratch copy of the embedded default run (common.scratch_project, runbook
drill's: 16 x 64 tokens per optimizer step, a checkpoint every 10 steps) shortened to --steps optimizer steps
(default 30), with no fault injected. litgpt's tokenized data cache is made once (benchmarks/chaos_contenders.py
`data_cache`) and copied into each run, so no run pays for tokenizing. While the runs train, the benchmark keeps
the cores busy: one `python -c "while True: pass"` per core this process may run on, at normal priority
(nice 0; --smoke: one loop at nice 10), started before the first run and killed (by their pids) after the last.

Nothing goes wrong in these runs, so an incident is spurious (bench_math.spurious): any incident at all,
except a slow-training incident whose diagnosis names an outside cause (contention, steal, throttled) and
which took no relaunching action (stop, resume, rollback): that one told the truth about the machine and
left the trainer alone. The goal is 0 spurious incidents.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.bench_math import spurious  # noqa: E402

SECTION = "False alarms under CPU contention"
TOKENS_PER_STEP = 16 * 64   # the scratch run's global batch (16 sequences) x block size (64)
BUSY = "while True: pass"


def start_busy(count: int, nice: int = 0) -> list[subprocess.Popen]:
    """`count` busy loops at `nice` (0: normal priority), each in its own session (killed by pid in stop_busy).
    Each is alone in its session, so its session's group gets the same nice (engine/process/autogroup.py:
    a niced process in its own session otherwise still takes a whole session's share of the CPU)."""
    from engine.process import autogroup

    def lower():
        os.nice(nice)
        autogroup.set_group_nice("self", nice)

    return [subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=lower if nice else None) for _ in range(count)]


def stop_busy(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def busy_cpu_s(procs: list[subprocess.Popen]) -> float:
    """CPU seconds the busy loops have used so far (utime + stime from /proc)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for proc in procs:
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


TOY_STEP_SECONDS = 0.25   # --trainer toy: the pace of its steps


def run_once(root: Path, steps: int, cache: Path | None, timeout: float) -> dict:
    """One undisturbed run; cache None: the toy trainer's run (common.toy_settings), else litgpt's on the cache."""
    from benchmarks.chaos_contenders import project

    if cache is None:
        config = common.scratch_project(root, **common.toy_settings(steps, TOY_STEP_SECONDS, save_interval=10))
    else:
        config = project(root, {"max_tokens": TOKENS_PER_STEP * steps}, cache)
    loaded = common.load_run(config)
    load = common.load_average()
    started = time.time()
    proc = common.start_watch(config, root / "watch.log")
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = f"stopped by the benchmark after {timeout:g} s"
    finally:
        common.stop(proc)   # only if still running
    wall = time.time() - started
    progress = common.final_progress(loaded.out_dir)
    incidents = []
    for record in common.incidents(loaded.run_dir):
        false, why = spurious(record)
        incidents.append({"id": record["id"], "playbook": record["playbook"], "outcome": record.get("outcome"),
                          "cause": (record.get("diagnosis") or {}).get("cause"),
                          "verdict": (record.get("diagnosis") or {}).get("verdict"),
                          "spurious": false, "why": why})
    return {"run": root.name, "wall_s": wall, "watch_exit": code, "load_at_start": load, "load_at_end": common.load_average(),
            "completed": progress is not None and progress.get("step_count") == steps,
            "steps": progress.get("step_count") if progress else None, "incidents": incidents,
            "spurious": sum(i["spurious"] for i in incidents)}


def table(results: list[dict]) -> str:
    rows = []
    for r in results:
        text = "; ".join(f"{i['id']} {i['playbook']} ({i['outcome']}" + (f", cause {i['cause']}" if i["cause"] else "")
                         + f"): {'**spurious**' if i['spurious'] else 'not spurious'}, {i['why']}" for i in r["incidents"])
        rows.append([r["run"], f"{r['wall_s']:.0f}", "yes" if r["completed"] else "**no**", str(r["watch_exit"]),
                     str(len(r["incidents"])), str(r["spurious"]), text or "-", r["load_at_start"]])
    return common.table(["run", "wall s", "completed", "watch exit", "incidents", "spurious", "the incidents",
                         "load avg at start"], rows, right={1, 4, 5})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="undisturbed runs (default 20; --smoke 1)")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per run (16 x 64 tokens each)")
    parser.add_argument("--busy", type=int, default=None,
                        help="busy loops beside the runs (default: one per core this process may run on; 0: none)")
    parser.add_argument("--busy-nice", type=int, default=None,
                        help="the busy loops' niceness (default 0, normal priority; --smoke 10)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per run")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="start no new run after this many minutes (the report says how many of --runs ran)")
    parser.add_argument("--root", type=Path, default=Path("/tmp/runbook-bench-false-alarms"))
    common.trainer_flag(parser)
    common.docs_flags(parser, "1 run, on the toy trainer unless --trainer litgpt")
    args = parser.parse_args(argv)
    trainer = common.chosen_trainer(args)
    if args.smoke:
        # the suite's smoke checks the report and the classification, not the contention: one busy loop at nice
        # 10 and a shorter run, so it does not hold both of CI's cores for minutes beside the other tests
        args.runs, args.steps = 1, min(args.steps, 12)
        args.busy = 1 if args.busy is None else args.busy
        args.busy_nice = 10 if args.busy_nice is None else args.busy_nice
    busy_nice = args.busy_nice or 0
    cores = common.cores()
    busy_count = cores if args.busy is None else args.busy
    load_start = common.load_average()
    t0 = time.time()
    args.root.mkdir(parents=True, exist_ok=True)
    from benchmarks.chaos_contenders import data_cache

    cache = data_cache(args.root) if trainer == "litgpt" else None   # the toy reads no tokenized data
    print(f"false alarms: {args.runs} {trainer} run(s) of {args.steps} steps beside {busy_count} busy loop(s); root {args.root}", flush=True)
    busy = start_busy(busy_count, busy_nice)
    busy_started = time.time()
    results = []
    try:
        for n in range(1, args.runs + 1):
            if args.max_minutes is not None and time.time() - t0 > 60 * args.max_minutes:
                print(f"  --max-minutes {args.max_minutes:g} reached: {n - 1} of {args.runs} runs done", flush=True)
                break
            r = run_once(args.root / f"run-{n:02d}", args.steps, cache, args.timeout)
            results.append(r)
            print(f"  run {n}: {r['wall_s']:.0f} s, completed {r['completed']}, {len(r['incidents'])} incident(s), "
                  f"{r['spurious']} spurious (load {r['load_at_end']})", flush=True)
            (args.root / "results.json").write_text(json.dumps({"runs": results}, indent=1, default=str))
    finally:
        busy_s = busy_cpu_s(busy)
        busy_wall = time.time() - busy_started
        stop_busy(busy)
    elapsed = time.time() - t0
    total = sum(r["spurious"] for r in results)
    all_incidents = sum(len(r["incidents"]) for r in results)
    busy_share = busy_s / busy_wall / cores if busy_wall and cores else 0.0
    verdict = (f"spurious incidents: {total} in {len(results)} undisturbed run(s) ({all_incidents} incident(s) in all); "
               f"goal 0: {'met' if total == 0 else '**missed**'}")
    contention = (f"{busy_count} busy loop(s) at nice {busy_nice} on {cores} core(s), {busy_s:.0f} CPU s over "
                  f"{busy_wall:.0f} s ({100 * busy_share:.0f}% of the cores)")
    text = table(results)
    print("\n" + text + "\n\n" + verdict + f"; contention: {contention}.")
    (args.root / "results.json").write_text(json.dumps({"runs": results, "total_spurious": total, "contention": contention,
                                                        "busy": busy_count, "steps": args.steps, "trainer": trainer},
                                                       indent=1, default=str))
    if not common.should_write(args):
        return 0
    short = "" if len(results) >= 20 else (
        f" **{len(results)} runs, not the 20 the benchmark runs by default**"
        + (f" (--max-minutes {args.max_minutes:g}: the time this session had)." if len(results) < args.runs else "."))
    body = f"""Command: `{common.command_line()}` ({len(results)} run(s) of {args.steps} optimizer steps, {elapsed / 60:.1f} min in all).{short}

Machine: {common.machine(load_start)}. Anything else running on the machine added to the busy loops
(the load average at each run's start is in the table): the contention these runs met is the benchmark's busy loops
*plus* whatever else ran, not a controlled amount.

Each run is `runbook watch` on a scratch copy of the embedded default run (runbook drill's: 16 x 64 tokens per
optimizer step, a checkpoint every 10 steps) cut to {args.steps} steps, with no fault; the tokenized data is made
once and copied into each run. Contention: {contention}, each `python -c "{BUSY}"`,
started before the first run and killed after the last. An incident in an undisturbed run is spurious
(`benchmarks/bench_math.py` `spurious`), except a slow-training incident whose diagnosis names an outside cause
(contention, steal, throttled) and which took no relaunching action (stop, resume, rollback).

{text}

**{verdict}.**"""
    common.write_section(SECTION, body)
    print(f"\nwrote the '{SECTION}' section of {common.DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
