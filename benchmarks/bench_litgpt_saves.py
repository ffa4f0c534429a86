"""litgpt's checkpoint saves: a whole litgpt trainer run through runbook's entry, with each checkpoint's
hyperparameters.yaml from one parse of the CLI (engine/trainers/litgpt/hyperparameters.py) side by side with
litgpt's own re-parse at every save.

    python benchmarks/bench_litgpt_saves.py              # 5 alternating samples of each, prints the figures
    python benchmarks/bench_litgpt_saves.py --write      # the same, and updates docs/benchmarks.md
    python benchmarks/bench_litgpt_saves.py --smoke      # 1 sample each of a 4-step run, nothing written (the suite's)

Each sample is a fresh trainer process on the scratch copy of the default run (40 optimizer steps, a checkpoint
every 10: 5 saves with the final one; --smoke 4 steps, every 2: 3 saves), in an out_dir of its own, with the
argv, environment and memory limit runbook launches it with. "litgpt's re-parse" is the same entry with
hyperparameters.parse_once made a no-op in that process (both through METERED_ENTRY, which records each save's
hyperparameters step and litgpt's parses: the proof that the entry's parse_once is in use). CPU is user + system of the finished child (getrusage);
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
# Both ways run the entry through this script, which meters litgpt's hyperparameters step at every save: the CPU
# seconds of the name litgpt's save_checkpoint calls, and how many times litgpt's own function (the parse) ran so
# far. It hooks hyperparameters.parse_once, so a metered line proves the entry called it; "litgpt's re-parse" is
# the same entry with parse_once installing the meter alone.
METERED_ENTRY = """import json, os, runpy, sys, time
from engine.trainers.litgpt import hyperparameters
real_parse_once, meter = hyperparameters.parse_once, os.environ["RUNBOOK_BENCH_SAVES_METER"]
def metered(pretrain):
    parses, litgpt_function = [], pretrain.save_hyperparameters
    def counted(*args, **kwargs):
        parses.append(1)
        return litgpt_function(*args, **kwargs)
    pretrain.save_hyperparameters = counted
    if {parse_once}:
        real_parse_once(pretrain)
    step = pretrain.save_hyperparameters
    def timed(*args, **kwargs):
        started = time.process_time()
        try:
            return step(*args, **kwargs)
        finally:
            with open(meter, "a") as out:
                out.write(json.dumps({{"cpu": time.process_time() - started, "parses": len(parses)}}) + "\\n")
    pretrain.save_hyperparameters = timed
hyperparameters.parse_once = metered
sys.argv = [{entry!r}, *sys.argv[1:]]
runpy.run_module({entry!r}, run_name="__main__", alter_sys=True)
"""
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
    script = METERED_ENTRY.format(parse_once=way == WAYS[0], entry=ENTRY)
    return [spec.argv[0], "-c", script, *spec.argv[3:]]   # spec.argv: [python, -m, ENTRY, pretrain, --config, FILE]


def sample(way: str, spec, out_dir: Path, log: Path) -> tuple[float, float, dict[str, bytes], list[dict]]:
    """(CPU s, wall s, {checkpoint folder: its hyperparameters.yaml}, the meter's line per save) of one trainer
    run from scratch."""
    shutil.rmtree(out_dir, ignore_errors=True)
    meter = log.with_suffix(".meter.jsonl")
    meter.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with open(log, "wb") as out:
        env = {**spec.env, "PYTHONPATH": str(ROOT), "RUNBOOK_BENCH_SAVES_METER": str(meter)}
        code = subprocess.run(argv_for(way, spec), cwd=spec.cwd, env=env,
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=600).returncode
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise RuntimeError(f"{way}: the trainer exited {code}: {log}\n{common.read_log(log)[-2000:]}")
    files = {p.parent.name: p.read_bytes() for p in sorted(out_dir.glob("*/hyperparameters.yaml"))}
    saves = [json.loads(line) for line in meter.read_text().splitlines()] if meter.is_file() else []
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, files, saves


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
    metered: dict[str, list[list[dict]]] = {way: [] for way in WAYS}
    reference: dict[str, bytes] | None = None
    for index in range(samples):
        for way in WAYS:
            cpu, wall, files, saves_metered = sample(way, spec, loaded.out_dir,
                                                     args.root / f"trainer-{index}-{WAYS.index(way)}.log")
            reference = reference if reference is not None else files
            if files != reference or len(files) < 3:
                raise RuntimeError(f"{way}: hyperparameters.yaml differs from the first sample's, or too few saves: "
                                   f"{sorted(files)} vs {sorted(reference)}")
            results[way].append((cpu, wall))
            metered[way].append(saves_metered)
    saves = len(reference or {})
    step_cpu = {way: statistics.median(sum(s["cpu"] for s in run) for run in runs) for way, runs in metered.items()}
    parses = {way: [run[-1]["parses"] if run else 0 for run in runs] for way, runs in metered.items()}
    (args.root / "results.json").write_text(json.dumps(
        {"saves": saves, **results, "hyperparameters step CPU s": step_cpu, "parses": parses}, indent=1))
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
                   "tests/litgpt/test_hyperparameters.py checks it against litgpt's own function on the reference run. "
                   f"Metered at each save: litgpt's parse ran {parses[WAYS[0]]} time(s) per run through runbook's entry "
                   f"and {parses[WAYS[1]]} without it; the hyperparameters step took {step_cpu[WAYS[0]]:.2f} CPU s "
                   f"against {step_cpu[WAYS[1]]:.2f} per run (medians).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
