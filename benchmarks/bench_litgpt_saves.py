"""litgpt's checkpoint saves: a whole litgpt trainer run through runbook's entry, with each checkpoint's
hyperparameters.yaml from one parse of the CLI (engine/trainers/litgpt/hyperparameters.py) side by side with
litgpt's own re-parse at every save.

    python benchmarks/bench_litgpt_saves.py              # 5 alternating samples of each, prints the figures
    python benchmarks/bench_litgpt_saves.py --write      # the same, and updates docs/benchmarks.md
    python benchmarks/bench_litgpt_saves.py --smoke      # 1 sample each of a 4-step run, nothing written (the suite's)

Each sample is a fresh trainer process on the scratch copy of the default run (40 optimizer steps, a checkpoint
every 10: 5 saves with the final one; --smoke 4 steps, every 2: 3 saves), in an out_dir of its own, with the
argv, environment and memory limit runbook launches it with. "litgpt's re-parse" is the same entry with
hyperparameters.parse_once made a no-op in that process. CPU is user + system of the finished child (getrusage);
the two ways alternate sample by sample, so a change in the machine's load hits both; the ratio is of the medians.
Every sample's checkpoints are compared: each hyperparameters.yaml must be byte-equal across both ways.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402
from engine.trainers.litgpt.launch import ENTRY_MODULE as ENTRY  # noqa: E402

SECTION = "litgpt's checkpoint saves"
SMOKE_STEPS, SMOKE_SAVE_INTERVAL = 4, 2
TOKENS_PER_STEP = 16 * 64   # the scratch run's global batch x block size
LITGPT_REPARSE = ("import sys, runpy\nfrom engine.trainers.litgpt import hyperparameters\n"
                  "hyperparameters.parse_once = lambda pretrain: None\n"
                  f"sys.argv = [{ENTRY!r}, *sys.argv[1:]]\n"
                  f"runpy.run_module({ENTRY!r}, run_name='__main__', alter_sys=True)")
WAYS = ("parsed once (runbook's entry)", "litgpt's re-parse at every save")


def launch(root: Path, smoke: bool):
    settings = {"max_tokens": SMOKE_STEPS * TOKENS_PER_STEP, "save_interval": SMOKE_SAVE_INTERVAL} if smoke else {}
    config = common.scratch_project(root / "project", **settings)
    loaded = common.load_run(config)
    common.seed_data(loaded.run_dir)   # the suite's smoke: the tokenized data of an earlier benchmark, if any
    spec = common.litgpt_launch(config, loaded.run_dir / "launches" / "bench")
    if spec.argv[2] != ENTRY:   # no tokenized data yet: the launch tokenizes first; once, outside the samples
        if common.start_bare(spec, root / "tokenize.log").wait() != 0:
            raise RuntimeError(f"the tokenizing launch failed: {root / 'tokenize.log'}")
        common.share_data(loaded.run_dir)
        spec = common.litgpt_launch(config, loaded.run_dir / "launches" / "bench-tokenized")
    return loaded, spec


def argv_for(way: str, spec) -> list[str]:
    if way == WAYS[0]:
        return list(spec.argv)   # [python, -m, ENTRY, pretrain, --config, FILE]
    return [spec.argv[0], "-c", LITGPT_REPARSE, *spec.argv[3:]]


def sample(way: str, spec, out_dir: Path, log: Path) -> tuple[float, float, dict[str, bytes]]:
    """(CPU s, wall s, {checkpoint folder: its hyperparameters.yaml}) of one trainer run from scratch."""
    shutil.rmtree(out_dir, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with open(log, "wb") as out:
        code = subprocess.run(argv_for(way, spec), cwd=spec.cwd, env={**spec.env, "PYTHONPATH": str(ROOT)},
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=600).returncode
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise RuntimeError(f"{way}: the trainer exited {code}: {log}\n{common.read_log(log)[-2000:]}")
    files = {p.parent.name: p.read_bytes() for p in sorted(out_dir.glob("*/hyperparameters.yaml"))}
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--root", type=Path, default=Path("/tmp/runbook-bench-litgpt-saves"))
    common.docs_flags(parser, "1 sample each of a 4-step run")
    args = parser.parse_args(argv)
    samples = 1 if args.smoke else args.samples
    load_at_start = common.load_average()
    loaded, spec = launch(args.root, args.smoke)
    results: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    reference: dict[str, bytes] | None = None
    for index in range(samples):
        for way in WAYS:
            cpu, wall, files = sample(way, spec, loaded.out_dir, args.root / f"trainer-{index}-{WAYS.index(way)}.log")
            reference = reference if reference is not None else files
            if files != reference or len(files) < 3:
                raise RuntimeError(f"{way}: hyperparameters.yaml differs from the first sample's, or too few saves: "
                                   f"{sorted(files)} vs {sorted(reference)}")
            results[way].append((cpu, wall))
    saves = len(reference or {})
    (args.root / "results.json").write_text(json.dumps({"saves": saves, **results}, indent=1))
    medians = {way: statistics.median(c for c, _ in values) for way, values in results.items()}
    rows = [[way, len(values), f"{medians[way]:.2f}", f"{min(c for c, _ in values):.2f}",
             f"{max(c for c, _ in values):.2f}", f"{statistics.median(w for _, w in values):.2f}"]
            for way, values in results.items()]
    once, reparse = medians[WAYS[0]], medians[WAYS[1]]
    common.publish(args, SECTION, load_at_start,
                   common.table(["way", "samples", "median CPU s", "min CPU s", "max CPU s", "median wall s"], rows),
                   f"A {saves}-save run costs {reparse - once:.2f} CPU s less parsed once ({reparse / once:.2f}x, ratio of "
                   f"the medians; {(reparse - once) / max(saves - 1, 1):.2f} s per save after the first). Each of the "
                   f"{saves} checkpoints' hyperparameters.yaml was byte-equal in every sample of both ways; "
                   "tests/litgpt/test_hyperparameters.py checks it against litgpt's own function on the reference run.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
