"""The `run` action against a flooding command and a backgrounding one: peak memory, wall time, leftovers.

    python benchmarks/bench_run_action.py             # 5 samples each, a 6 s flood; prints the table
    python benchmarks/bench_run_action.py --write     # the same, and writes its section of docs/benchmarks.md
    python benchmarks/bench_run_action.py --smoke     # the test suite's: 1 sample, a 1 s flood, a 1 GiB limit

Two contenders run the same command with the same timeout, each in a fresh Python process (its VmHWM,
reset just before the command, is the action's own peak), under an address-space limit (--memory-limit-mb) so that the
seed's reader cannot take the machine down:

- "seed": the `run` action as it was (`subprocess.run(capture_output=True, text=True, timeout=...)`);
- "bounded": engine/language/actions/run.py today (engine/core/bounded_command.py).

Commands: `yes` with the flood timeout (it never ends by itself: the timeout must stop it), and
`sh -c "sleep 600.N & echo started"` with a 10 s timeout (the command ends at once; its background child
holds the pipe). After each sample the benchmark looks for the sleep by its unique argument: a
leftover is counted, then killed (it is this benchmark's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.bench_math import summarize  # noqa: E402

SECTION = "The run action: a flood and a background child (issue 34)"
BACKGROUND_TIMEOUT_S = 10.0

CHILD = r"""
import json, subprocess, sys, time
from pathlib import Path
from types import SimpleNamespace

from benchmarks import peak_memory

contender, timeout, argv = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])


output_bytes = []   # how much the command wrote before it ended or was stopped: the flood each contender met


def seed_apply(argv, timeout):   # the `run` action before issue 34, as it was
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=".")
    except subprocess.TimeoutExpired as err:   # carries the raw bytes read until the deadline
        output_bytes.append(len(err.stdout or b"") + len(err.stderr or b""))
        return False, f"{argv[0]}: {err}"
    except OSError as err:
        return False, f"{argv[0]}: {err}"
    output = (done.stdout + done.stderr)[-2000:]
    output_bytes.append(len(done.stdout) + len(done.stderr))
    return done.returncode == 0, f"{argv[0]} exited {done.returncode}"


def bounded_apply(argv, timeout):
    from engine.language.actions import run as run_action
    from engine.language.actions.base import ActionFailed

    real_run_bounded = run_action.run_bounded

    def counted(*args, **kwargs):   # the action's own call, its result's byte count noted on the way out
        done = real_run_bounded(*args, **kwargs)
        output_bytes.append(done.output_bytes)
        return done

    run_action.run_bounded = counted

    class Lent:
        loaded = SimpleNamespace(project_dir=Path("."))
        def note(self, text):
            pass
    try:
        result = run_action.ACTION.apply(run_action.RunParams(argv=argv, timeout=timeout), Lent())
        return result.ok, result.summary
    except ActionFailed as failed:
        return False, str(failed)


apply = seed_apply if contender == "seed" else bounded_apply
import engine.language.actions.run  # both: the action's module loaded before the clock, as in the watcher
before_kb = peak_memory.start()   # the peak from here (benchmarks/peak_memory.py)
started = time.monotonic()
try:
    ok, summary = apply(argv, timeout)
except MemoryError:
    ok, summary = False, "MemoryError"
seconds = time.monotonic() - started
print(json.dumps({"ok": ok, "summary": summary[:200], "seconds": seconds,
                  "maxrss_kb": peak_memory.peak_kb(), "before_kb": before_kb,
                  "output_bytes": output_bytes[0] if output_bytes else None}))
"""


def leftovers(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (the sample's unique sleep argument)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if f"sleep {marker}" in cmdline and state != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def sample(contender: str, argv: list[str], timeout: float, limit_mb: int, marker: str | None) -> dict:
    limit = limit_mb * 1024 * 1024

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", CHILD, contender, str(timeout), json.dumps(argv)], capture_output=True,
                          text=True, timeout=timeout + 120, cwd=common.ROOT, preexec_fn=limited,
                          env={**os.environ, "PYTHONPATH": str(common.ROOT)})
    wall = time.monotonic() - started
    try:
        figures = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):   # died before it could say (the limit hit outside the try)
        figures = {"ok": False, "summary": (done.stderr.strip().splitlines() or ["no output"])[-1][:200],
                   "seconds": wall, "maxrss_kb": None, "before_kb": None, "output_bytes": None}
    left = leftovers(marker) if marker else []
    for pid in left:                   # this benchmark's own sleep: counted, then stopped
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return {**figures, "contender": contender, "left_running": len(left), "child_exit": done.returncode}


def run_all(samples: int, flood_s: float, limit_mb: int) -> dict:
    results: dict[str, dict[str, list[dict]]] = {"flood": {}, "background": {}}
    for i in range(samples):
        for contender in ("seed", "bounded"):   # alternated: a slow moment on the machine hits both
            results["flood"].setdefault(contender, []).append(sample(contender, ["yes"], flood_s, limit_mb, None))
            marker = f"600.{os.getpid()}{i}{len(contender)}"
            results["background"].setdefault(contender, []).append(
                sample(contender, ["sh", "-c", f"sleep {marker} & echo started"], BACKGROUND_TIMEOUT_S, limit_mb, marker))
    return results


def outcome(row: dict) -> str:
    """PURE. What one sample's action answered, in a few words."""
    summary = row["summary"]
    if "MemoryError" in summary:
        return "MemoryError at the address-space limit"
    if "timed out" in summary or "did not finish" in summary:
        return "failed: timed out"
    if row["ok"]:
        return "ok, its background child killed" if "killed them" in summary else "ok"
    return summary[:80]


def figures_of(rows: list[dict]) -> dict:
    rss = summarize([r["maxrss_kb"] / 1024 if r["maxrss_kb"] else None for r in rows])
    wall = summarize([r["seconds"] for r in rows])
    return {"rss": rss, "wall": wall, "left": sum(r["left_running"] for r in rows),
            "outcomes": sorted({outcome(r) for r in rows})}


def report(results: dict, flood_s: float, limit_mb: int) -> tuple[str, dict]:
    rows, ratios = [], {}
    for scenario, timeout in (("flood", flood_s), ("background", BACKGROUND_TIMEOUT_S)):
        seen = {c: figures_of(results[scenario][c]) for c in ("seed", "bounded")}
        for contender, f in seen.items():
            command = "yes" if scenario == "flood" else "sh -c 'sleep 600 & echo started'"
            rows.append([f"`{command}`, timeout {timeout:g} s", contender, f["rss"].text(".0f"), f["wall"].text(".2f"),
                         f["left"], "; ".join(f["outcomes"])])
        seed, bounded = seen["seed"], seen["bounded"]
        if seed["rss"].median and bounded["rss"].median:
            ratios[f"{scenario} peak RSS seed/bounded"] = seed["rss"].median / bounded["rss"].median
        if seed["wall"].median and bounded["wall"].median:
            ratios[f"{scenario} wall seed/bounded"] = seed["wall"].median / bounded["wall"].median
    table = common.table(["command", "contender", "peak RSS MB median / worst (n)", "wall s median / worst (n)",
                          "left running", "outcome"], rows, right={2, 3, 4})
    ratio_text = ", ".join(f"{k} {v:.1f}x" for k, v in ratios.items())
    body = f"""{table}

Ratios of the medians: {ratio_text}.

Each sample is a fresh Python process running one contender once (its VmHWM, reset before the command, is that run's peak),
under an address-space limit of {limit_mb:,} MiB (RLIMIT_AS) so the seed's reader ends in MemoryError
instead of taking the machine; "left running" counts the background sleeps found alive after the sample
(the benchmark kills them). "seed": `subprocess.run(capture_output=True, text=True, timeout=...)`, the
`run` action before issue 34; "bounded": engine/core/bounded_command.py (64 KiB kept, the process group
stopped at the deadline, SIGTERM then SIGKILL after 0.3 s, and killed when the command leaves it behind)."""
    return body, ratios


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--flood-seconds", type=float, default=6.0)
    parser.add_argument("--memory-limit-mb", type=int, default=3072)
    parser.add_argument("--root", type=Path, default=None, help="where results.json goes (default: nowhere)")
    common.docs_flags(parser, "1 sample, a 1 s flood, a 1 GiB address-space limit")
    args = parser.parse_args(argv)
    if args.smoke:
        args.samples, args.flood_seconds, args.memory_limit_mb = 1, 1.0, 1024
    load_at_start = common.load_average()
    results = run_all(args.samples, args.flood_seconds, args.memory_limit_mb)
    body, ratios = report(results, args.flood_seconds, args.memory_limit_mb)
    body = f"Command: `{common.command_line()}`  \nMachine: {common.machine(load_at_start)}\n\n{body}"
    print(f"## {SECTION}\n\n{body}")
    if args.root is not None:
        args.root.mkdir(parents=True, exist_ok=True)
        (args.root / "results.json").write_text(json.dumps(results, indent=2))
    if common.should_write(args):
        common.write_section(SECTION, body)
    return {"results": results, "ratios": ratios}


if __name__ == "__main__":
    main()
