"""Where the test suite's time goes: each test's CPU (with every process it started) beside its wall time,
per folder and per test, and the floor that CPU sets on the suite's wall time on this machine's cores.

    python benchmarks/bench_suite_cpu.py                  # the README's test command, profiled; prints the report
    python benchmarks/bench_suite_cpu.py --write          # the same, and updates docs/benchmarks.md
    python benchmarks/bench_suite_cpu.py -- tests/unit    # other pytest arguments (after --)
    python benchmarks/bench_suite_cpu.py --smoke          # the test suite's: two generated tests, nothing written

The clock is benchmarks/suite_cpu_plugin.py's (a cgroup v1 cpuacct group per xdist worker, so the CPU of
watchers, launchers and trainers that exit as grandchildren counts). A test's idle time is its wall time
less its CPU: waits for hang timeouts, pacing, a scheduler. On C cores the suite cannot finish in less than
its summed CPU / C, however it is scheduled; idle time is what more workers could fill, at the price of load
on the timing-sensitive tests.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import cores, docs_flags, load_average, publish, table  # noqa: E402

SECTION = "Where the test suite's time goes"
README_ARGS = ["-q", "-n", "3", "--dist", "loadgroup"]   # README.md's test command
TOP = 15

SMOKE_TESTS = '''
import subprocess, sys, time
from pathlib import Path

SPIN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.0: pass\\nopen(sys.argv[1], 'w').close()"

def test_spins_in_a_grandchild(tmp_path):
    """1 CPU s in a process whose parent exits at once: a grandchild no getrusage of ours sees."""
    done = tmp_path / "done"
    subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]])",
                    "import sys\\n" + SPIN, str(done)], check=True)
    deadline = time.monotonic() + 60
    while not done.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)

def test_waits():
    time.sleep(1.0)
'''


def rows_of(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("cpu-*.jsonl")) for line in path.read_text().splitlines() if line]


def folder_of(test_id: str) -> str:
    parts = test_id.split("::")[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def report(rows: list[dict], wall_s: float, outcome: str) -> list[str]:
    cpu = sum(r["cpu_s"] for r in rows)
    summed_wall = sum(r["wall_s"] for r in rows)
    idle = sum(max(0.0, r["wall_s"] - r["cpu_s"]) for r in rows)
    n = cores()
    clocks = sorted({r["clock"] for r in rows})
    summary = (f"{len(rows)} tests, {outcome}: the suite took {wall_s / 60:.1f} min of wall time; its tests "
               f"{cpu / 60:.1f} min of CPU and {summed_wall / 60:.1f} min of summed wall time, of which "
               f"{idle / 60:.1f} min idle (wall less CPU). On {n} cores it cannot take less than "
               f"{cpu / n / 60:.1f} min (CPU / cores). Clock: {', '.join(clocks) or 'none'}.")
    by_folder: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for r in rows:
        entry = by_folder[folder_of(r["id"])]
        entry[0] += 1
        entry[1] += r["cpu_s"]
        entry[2] += r["wall_s"]
        entry[3] += max(0.0, r["wall_s"] - r["cpu_s"])
    folders = table(["folder", "tests", "CPU min", "wall min", "idle min", "share of CPU"],
                    [[f, int(c), f"{cp / 60:.1f}", f"{w / 60:.1f}", f"{i / 60:.1f}", f"{cp / cpu:.0%}" if cpu else "-"]
                     for f, (c, cp, w, i) in sorted(by_folder.items(), key=lambda kv: -kv[1][1])])

    def tests(key, title: str) -> str:
        chosen = sorted(rows, key=key, reverse=True)[:TOP]
        return f"{title}\n\n" + table(["test", "CPU s", "wall s"],
                                      [[r["id"].replace("|", "\\|"), f"{r['cpu_s']:.1f}", f"{r['wall_s']:.1f}"] for r in chosen])

    return [summary, folders, tests(lambda r: r["cpu_s"], f"The {TOP} tests that cost the most CPU:"),
            tests(lambda r: r["wall_s"] - r["cpu_s"], f"The {TOP} tests that wait the most (wall less CPU):")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    docs_flags(parser, "two generated tests (a grandchild's CPU, a wait), nothing written")
    parser.add_argument("--root", type=Path, default=None, help="where the per-test records go (default: a temporary folder)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: README's test command)")
    args = parser.parse_args(argv)
    load_at_start = load_average()
    root = args.root or Path(tempfile.mkdtemp(prefix="suite-cpu-"))
    records = root / "records"
    pytest_args = args.pytest_args or README_ARGS
    cwd = ROOT
    if args.smoke:
        cwd = root / "smoke"
        cwd.mkdir(parents=True, exist_ok=True)
        (cwd / "test_smoke_cpu.py").write_text(textwrap.dedent(SMOKE_TESTS))
        pytest_args = ["-q", "-p", "no:cacheprovider", "test_smoke_cpu.py"]
    env = {**os.environ, "RUNBOOK_SUITE_CPU_DIR": str(records),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "benchmarks.suite_cpu_plugin", *pytest_args],
                          cwd=cwd, env=env, capture_output=True, text=True)
    wall_s = time.monotonic() - started
    (root / "pytest-output.txt").write_text(done.stdout + done.stderr)   # a failure's traceback, kept
    for line in done.stdout.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            print(line)
    last = [line for line in done.stdout.splitlines() if re.search(r"\b(passed|failed|error)", line)]
    outcome = (last[-1].strip("= ") if last else f"pytest exited {done.returncode}")
    rows = rows_of(records)
    if not rows:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
        print(f"no test recorded under {records}")
        return 2
    (root / "results.json").write_text(json.dumps({"wall_s": wall_s, "outcome": outcome, "rows": rows}, indent=1))
    publish(args, SECTION, load_at_start, *report(rows, wall_s, outcome))
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
