"""What a warm spare's imports cost the relaunch they run beside: why engine/process/warm_spare.py starts the
next spare once its launch trains (after the first trained launch), and why the spare waits niced.

    python benchmarks/bench_spare_contention.py --repeats 4
    python benchmarks/bench_spare_contention.py --smoke      # the test suite's: one sample alone, one beside the
                                                             # spare at nice +10 (on a run bench_relaunch.py --smoke
                                                             # left in --root, if any)

Each sample is benchmarks/relaunch_phases.py's `warm` relaunch of the default tiny run (imports done,
then litgpt's CLI, data, checkpoint load, the first optimizer step); the clock is relaunch -> first new
optimizer step. Three kinds, alternating: alone; with a second interpreter importing what a spare imports
(torch, lightning, litgpt, litdata) started the moment the relaunch begins, at nice +10 (as spare_main
waits) and at nice 0, and stopped once the relaunch's first step is done. Prints the samples and medians; writes nothing. --smoke leaves out the nice 0 kind: the
same sample as nice +10's with another nice value, and each sample is a litgpt relaunch (tens of seconds on
loaded cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_relaunch, common  # noqa: E402

SPARE_IMPORTS = "import torch, lightning, litgpt.pretrain, jsonargparse, litgpt.data, litdata"
KINDS = {"alone": None, "beside a spare's imports at nice +10": 10, "beside a spare's imports at nice 0": 0}
SMOKE_KINDS = ("alone", "beside a spare's imports at nice +10")   # without the spare, and beside it as spare_main runs it


def sample(config: Path, env: dict, nice: int | None) -> float:
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.relaunch_phases", "warm", str(config)],
                            cwd=bench_relaunch.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    spare, phases = None, {}
    for line in proc.stdout:
        if line.startswith('{"phase"'):
            record = json.loads(line)
            phases[record["phase"]] = record["s"]
            if record["phase"] == "warm: relaunch begins" and nice is not None:
                spare = subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-c", SPARE_IMPORTS], env=env)
    proc.wait()
    if spare is not None:   # the figure is taken: the rest of the spare's imports (at nice +10 on loaded cores,
        spare.kill()        # tens of seconds starved) would delay only the next sample, so it is stopped, not awaited
        spare.wait()
    if "first optimizer step done" not in phases:
        raise RuntimeError(f"the sample did not reach its first step (exit {proc.returncode})")
    return phases["first optimizer step done"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--root", type=Path, default=Path("/tmp/runbook-bench-spare-contention"))
    parser.add_argument("--smoke", action="store_true", help="one sample alone and one beside the spare at nice +10; "
                        "<root>/results.json")
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 1
    load = common.load_average()
    config, env = bench_relaunch.trained_run(args.root, reuse=args.smoke, smoke=args.smoke)   # --smoke: bench_relaunch's run, when there
    kinds = {kind: nice for kind, nice in KINDS.items() if kind in SMOKE_KINDS or not args.smoke}
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.repeats):
        for kind, nice in kinds.items():
            samples[kind].append(sample(config, env, nice))
            print(f"{kind}: {samples[kind][-1]:.2f} s", flush=True)
    alone = statistics.median(samples["alone"])
    rows = [[kind, f"{statistics.median(v):.2f}", f"{statistics.median(v) / alone:.2f}x", ", ".join(f"{x:.2f}" for x in v)]
            for kind, v in samples.items()]
    print(f"\nload average at the start: {load}; end: {common.load_average()}")
    print(common.table(["warm relaunch -> first new optimizer step", "median s", "x alone", "samples s"], rows, right={1, 2}))
    (args.root / "results.json").write_text(json.dumps(samples, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
