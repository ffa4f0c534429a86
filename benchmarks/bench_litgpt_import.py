"""A litgpt trainer's imports: `import litgpt.pretrain` as runbook's entry does it (engine/trainers/litgpt/lean_imports.py:
torchmetrics told transformers and matplotlib are absent) side by side with the plain import, with both installed.

    python benchmarks/bench_litgpt_import.py            # 7 alternating samples of each, prints the figures
    python benchmarks/bench_litgpt_import.py --write    # the same, and updates docs/benchmarks.md
    python benchmarks/bench_litgpt_import.py --smoke    # 1 sample each, nothing written (the test suite's)

Each sample is a fresh interpreter (imports cannot be undone); its CPU time (user + system, from getrusage of
the finished child) and wall time are taken around the whole process. The two ways alternate sample by sample,
so a change in the machine's load hits both; the ratio is of the medians. Every start of a litgpt trainer
(launch, resume, each rank, the preflight parse) pays this import.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import docs_flags, load_average, publish, table  # noqa: E402

SECTION = "A litgpt trainer's imports"
WAYS = {
    "runbook's entry (lean_imports)": "import engine.trainers.litgpt.lean_imports\nimport litgpt.pretrain",
    "plain `import litgpt.pretrain`": "import litgpt.pretrain",
}
CHECK = "\nimport sys\nprint('transformers' in sys.modules, 'matplotlib' in sys.modules)"


def sample(code: str) -> tuple[float, float, bool, bool]:
    """(CPU s, wall s, transformers imported, matplotlib imported) of one fresh interpreter running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code + CHECK], capture_output=True, text=True, cwd=ROOT, check=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    transformers, matplotlib = done.stdout.strip().splitlines()[-1].split()
    return cpu, wall, transformers == "True", matplotlib == "True"


def imported(flags: list[bool]) -> str:
    return "yes" if all(flags) else "no" if not any(flags) else "sometimes"


def measure(samples: int) -> dict[str, list[tuple[float, float, bool, bool]]]:
    """way -> (CPU s, wall s, transformers imported, matplotlib imported) per sample, the ways alternating."""
    results: dict[str, list[tuple[float, float, bool, bool]]] = {name: [] for name in WAYS}
    for _ in range(samples):
        for name, code in WAYS.items():
            results[name].append(sample(code))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=7)
    docs_flags(parser, "1 sample each")
    args = parser.parse_args(argv)
    samples = 1 if args.smoke else args.samples
    load_at_start = load_average()
    results = measure(samples)
    rows, medians = [], {}
    for name, values in results.items():
        cpu = [v[0] for v in values]
        wall = [v[1] for v in values]
        medians[name] = statistics.median(cpu)
        rows.append([name, len(values), f"{statistics.median(cpu):.2f}", f"{min(cpu):.2f}", f"{max(cpu):.2f}",
                     f"{statistics.median(wall):.2f}", *(imported([v[i] for v in values]) for i in (2, 3))])
    lean, plain = medians["runbook's entry (lean_imports)"], medians["plain `import litgpt.pretrain`"]
    publish(args, SECTION, load_at_start,
            table(["way", "samples", "median CPU s", "min CPU s", "max CPU s", "median wall s", "transformers imported",
                   "matplotlib imported"], rows),
            f"runbook's entry saves {plain - lean:.2f} CPU s of every litgpt trainer start ({plain / lean:.2f}x, ratio of "
            "the medians). Checked in tests/litgpt/test_lean_imports.py: neither transformers nor matplotlib is imported, and the "
            "one metric litgpt uses (RunningMean) gives the same values.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
