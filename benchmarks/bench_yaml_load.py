"""Reading the shipped playbooks at a watcher's start: load_yaml (libyaml's events into ruamel's composer and
round-trip constructor, engine/core/yaml_source.py) side by side with ruamel's own pure-Python load.

    python benchmarks/bench_yaml_load.py            # 15 alternating samples of each, prints the figures
    python benchmarks/bench_yaml_load.py --write    # the same, and updates docs/benchmarks.md
    python benchmarks/bench_yaml_load.py --smoke    # 2 samples, nothing written (the test suite's)

One sample reads every playbooks/*.yaml once, the cache emptied first (a new watcher process has none).
The two ways alternate sample by sample, so a change in the machine's load hits both. Times are the
process's CPU time (time.process_time); the ratio is of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import docs_flags, load_average, publish, table  # noqa: E402
from engine.core import yaml_source  # noqa: E402
from engine.core.bounded_read import read_text_file  # noqa: E402

SECTION = "Reading the playbooks at a watcher's start"


def fast(paths: list[Path]) -> None:
    yaml_source._PARSED.clear()
    for path in paths:
        yaml_source.load_yaml(path)


def ruamel_only(paths: list[Path]) -> None:
    for path in paths:
        yaml_source.round_trip_yaml().load(read_text_file(path))


def cpu_seconds(work, paths: list[Path]) -> float:
    started = time.process_time()
    work(paths)
    return time.process_time() - started


def read_through_libyaml(paths: list[Path]) -> list[Path]:
    """The paths whose load took the fast path: load_yaml keeps libyaml's events for them (ruamel's own parse
    keeps a tree instead), so a fast path that is lost, or never taken, shows here and not only in a timing."""
    yaml_source._PARSED.clear()
    for path in paths:
        yaml_source.load_yaml(path)
    return [path for path in paths if yaml_source._PARSED[(str(path), read_text_file(path))][0] is not None]


def measure(paths: list[Path], samples: int) -> dict[str, list[float]]:
    """CPU seconds per sample of each way, alternating sample by sample."""
    times: dict[str, list[float]] = {"load_yaml (libyaml events)": [], "ruamel round-trip load": []}
    for _ in range(samples):
        times["load_yaml (libyaml events)"].append(cpu_seconds(fast, paths))
        times["ruamel round-trip load"].append(cpu_seconds(ruamel_only, paths))
    return times


def speedup(times: dict[str, list[float]]) -> float:
    """How many times faster load_yaml is: the ratio of the medians (> 1: faster)."""
    return statistics.median(times["ruamel round-trip load"]) / statistics.median(times["load_yaml (libyaml events)"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=15)
    docs_flags(parser, "2 samples")
    args = parser.parse_args(argv)
    samples = 2 if args.smoke else args.samples
    load_at_start = load_average()
    paths = sorted((ROOT / "playbooks").glob("*.yaml"))
    for path in paths:   # the same trees both ways, before anything is timed
        assert yaml_source.plain(yaml_source.load_yaml(path)) == yaml_source.plain(
            yaml_source.round_trip_yaml().load(read_text_file(path))), path
    fast_ones = read_through_libyaml(paths)
    times = measure(paths, samples)
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = speedup(times)
    rows = [[name, len(values), f"{medians[name]:.3f}", f"{min(values):.3f}", f"{max(values):.3f}"]
            for name, values in times.items()]
    publish(args, SECTION, load_at_start,
            f"Every one of the {len(paths)} shipped playbooks read once per sample (CPU seconds per sample):",
            table(["way", "samples", "median s", "min s", "max s"], rows),
            f"load_yaml is {ratio:.1f}x faster (ratio of the medians), {len(fast_ones)} of the {len(paths)} read "
            "through libyaml's events, with the same trees: checked here on every "
            "shipped playbook, and in tests/unit/test_yaml_fast_path.py on every YAML file of the repository "
            "(values, types, and every key's and item's line and column).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
