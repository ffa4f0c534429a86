"""The chaos run N times: does every contender meet the same incidents in every run? (issue 29 item 3)

    python benchmarks/bench_chaos_repeat.py --runs 3 --root DIR -- --quick --no-warm
                                                   # bench_chaos.py three times (its options after --), one table
    python benchmarks/bench_chaos_repeat.py --runs 3 --write --root DIR -- --quick --no-warm
                                                   # and writes its section of docs/benchmarks.md
    python benchmarks/bench_chaos_repeat.py --smoke --root DIR
                                                   # the test suite's: one run of bench_chaos.py --smoke

Each run is `python benchmarks/bench_chaos.py --root DIR/run-K <options>` in its own process and folder (its
own reference, footprint probe and memory limit), one after the other. The table lists, per contender, the
incident list of each run (the playbook and outcome per incident, in order) and whether all runs agreed; a
contender agrees when every run produced the same list and the same end (completed or where it stopped).
The timings are left out: they differ between runs by nature, the incidents must not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402

SECTION = "Chaos run, repeated"
REPO = Path(__file__).resolve().parent.parent


def contender_key(name: str) -> str:
    """'(c) naive loop, cap 5, micro-batch 128' -> '(c)': the label that is the same in every run."""
    return name.split(" ", 1)[0]


def signature(outcome: dict) -> tuple:
    """What must repeat: the incidents in order and how the contender ended (not its timings)."""
    end = "completed" if outcome.get("completed") else (outcome.get("note") or "").split(":", 1)[0]
    return tuple(outcome.get("incidents") or ()), end


def agreement(runs: list[list[dict]]) -> list[dict]:
    """Per contender (in the first run's order): each run's signature and whether all runs agree.
    A contender missing from a run counts as a disagreement (None in that run's place)."""
    order: list[str] = []
    for run in runs:
        order += [key for key in (contender_key(o["name"]) for o in run) if key not in order]
    rows = []
    for key in order:
        found = [next((signature(o) for o in run if contender_key(o["name"]) == key), None) for run in runs]
        name = next(o["name"] for run in runs for o in run if contender_key(o["name"]) == key)
        rows.append({"contender": name, "signatures": found, "agreed": None not in found and len(set(found)) == 1})
    return rows


def show(sig: tuple | None) -> str:
    if sig is None:
        return "(missing)"
    incidents, end = sig
    return f"{', '.join(incidents) or 'none'} -> {end}"


def report(rows: list[dict], runs: int) -> str:
    headers = ["contender", *[f"run {k}" for k in range(1, runs + 1)], "agreed"]
    body = [[row["contender"], *[show(s) for s in row["signatures"]], "yes" if row["agreed"] else "**no**"] for row in rows]
    agreed = sum(row["agreed"] for row in rows)
    return (common.table(headers, body) + f"\n\nincident lists agreed in all {runs} run(s): {agreed} of {len(rows)} "
            f"contender(s)" + ("" if agreed == len(rows) else " (the rows marked **no** differ between runs)"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chaos_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="chaos runs, one after the other (default 3; --smoke 1)")
    parser.add_argument("--root", type=Path, default=Path("/tmp/runbook-bench-chaos-repeat"))
    parser.add_argument("--section", default=SECTION, help="the docs/benchmarks.md section to write")
    common.docs_flags(parser, "one run of bench_chaos.py --smoke")
    args = parser.parse_args(own)
    if args.smoke:
        args.runs, chaos_args = 1, ["--smoke", *[a for a in chaos_args if a != "--smoke"]]
    args.root.mkdir(parents=True, exist_ok=True)
    load_start = common.load_average()
    t0 = time.time()
    results, walls = [], []
    for k in range(1, args.runs + 1):
        root = args.root / f"run-{k}"
        started = time.time()
        command = [sys.executable, str(REPO / "benchmarks" / "bench_chaos.py"), "--root", str(root), *chaos_args]
        print(f"run {k}/{args.runs}: {' '.join(command[1:])}", flush=True)
        done = subprocess.run(command, cwd=REPO)
        walls.append(time.time() - started)
        if done.returncode != 0:
            print(f"run {k}: bench_chaos.py exited {done.returncode}; stopping", file=sys.stderr)
            return done.returncode
        results.append(json.loads((root / "results.json").read_text()))
    rows = agreement(results)
    text = report(rows, args.runs)
    print("\n" + text)
    (args.root / "agreement.json").write_text(json.dumps({"runs": args.runs, "chaos_args": chaos_args, "rows": rows,
                                                          "wall_s": walls}, indent=1))
    if not common.should_write(args):
        return 0
    body = (f"Command: `{common.command_line()}` ({args.runs} runs of `bench_chaos.py {' '.join(chaos_args)}`, "
            f"{(time.time() - t0) / 60:.1f} min in all; per run {', '.join(f'{w / 60:.1f}' for w in walls)} min).\n\n"
            f"Machine: {common.machine(load_start)}.\n\nEach run is its own process and folder: its own reference run, "
            "footprint probe and memory limit. Per contender, the incidents of each run in order (playbook and "
            "outcome) and how it ended; the timings are left out (they differ by nature).\n\n" + text + "\n")
    common.write_section(args.section, body)
    print(f"\nwrote the '{args.section}' section of {common.DOCS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
