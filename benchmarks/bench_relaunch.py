"""Where a relaunch's time goes, cold vs warm, on the default tiny model: relaunch -> first new step.

    python benchmarks/bench_relaunch.py              # 5 cold + 5 warm, alternating; prints the table
    python benchmarks/bench_relaunch.py --write      # the same, and writes its section of docs/benchmarks.md
    python benchmarks/bench_relaunch.py --smoke      # the test suite's: 1 cold + 1 warm, resuming a 4-step run from
                                                     # its step 2; <root>/results.json

A scratch copy of the default run trains 40 steps with plain `litgpt pretrain` (checkpoints every 10);
then each sample is a fresh interpreter resuming from step 20 through runbook's entry path
(benchmarks/relaunch_phases.py), timed phase by phase. cold = what every relaunch paid before
trainer.warm_spare (interpreter, imports, then litgpt); warm = the same after the imports, which a warm
spare (engine/process/warm_spare.py) has done before the relaunch. Each phase is reported as median and worst
(the largest) over the samples. "progress" here is the first optimizer step done after the resume (litgpt's
first `(step)` iteration), not the first progress line (one micro-batch) that bench_latency.py times.
--smoke trains 4 steps (a checkpoint every 2) and resumes from step 2: the same relaunch of the same model,
with less training before it.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.bench_math import summarize  # noqa: E402

SECTION = "Relaunch phases (cold vs warm spare)"
REPO = Path(__file__).resolve().parent.parent
RESUME_STEP = 20   # the trained run is runbook drill's scratch run (40 steps, a checkpoint every 10): samples resume from step 20
SMOKE_STEPS, SMOKE_RESUME_STEP = 4, 2  # --smoke's: the fewest steps that leave a checkpoint with steps after it to train
TOKENS_PER_STEP = 16 * 64              # the scratch run's global batch x block size


def trained_run(root: Path, reuse: bool = False, smoke: bool = False) -> tuple[Path, dict]:
    """A finished 40-step run and a litgpt config resuming from its step 20 (smoke: a 4-step run, from its
    step 2); returns (config, env). With reuse, the run an earlier call left in root is taken when it
    finished (its resume step is still there)."""
    from ruamel.yaml import YAML

    resume_step = SMOKE_RESUME_STEP if smoke else RESUME_STEP
    if reuse and (root / "configs" / "run_config.yaml").exists():
        loaded = common.load_run(root / "configs" / "run_config.yaml")
        resume = loaded.run_dir / "launches" / "train" / "resume.yaml"
        if resume.exists() and common.final_progress(loaded.out_dir) and common.checkpoint_done(loaded.out_dir, resume_step):
            spec = common.litgpt_launch(loaded.path, loaded.run_dir / "launches" / "reuse")
            return resume, {**spec.env, "PYTHONPATH": str(REPO)}
    config = common.scratch_project(root, **({"max_tokens": SMOKE_STEPS * TOKENS_PER_STEP, "save_interval": SMOKE_RESUME_STEP}
                                             if smoke else {}))
    loaded = common.load_run(config)
    common.seed_data(loaded.run_dir)   # the suite's smokes: the tokenized data of an earlier benchmark, if any
    spec = common.litgpt_launch(config, loaded.run_dir / "launches" / "train")
    if common.start_bare(spec, loaded.run_dir / "logs" / "train.log").wait() != 0:
        raise RuntimeError(f"the training run failed: {loaded.run_dir / 'logs' / 'train.log'}")
    common.share_data(loaded.run_dir)
    yaml = YAML(typ="safe", pure=True)
    tree = yaml.load(spec.config_file.read_text())
    tree["resume"] = str(loaded.out_dir / f"step-{resume_step:08d}" / "lit_model.pth")
    tree["out_dir"] = str(root / "relaunch-out")   # the samples' own out_dir: the run's stays as it is
    resume = spec.config_file.with_name("resume.yaml")
    buffer = io.StringIO()
    yaml.dump(tree, buffer)
    resume.write_text(buffer.getvalue())
    return resume, {**spec.env, "PYTHONPATH": str(REPO)}


def sample(mode: str, config: Path, env: dict) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.relaunch_phases", mode, str(config)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    phases = {}
    for line in out.stdout.splitlines():
        if line.startswith("{\"phase\""):
            record = json.loads(line)
            phases[record["phase"]] = record["s"]
    if "first optimizer step done" not in phases:
        raise RuntimeError(f"{mode} sample did not reach its first step:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return phases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="cold and warm samples each (default 5; --smoke 1)")
    parser.add_argument("--root", type=Path, default=Path("/tmp/runbook-bench-relaunch"))
    parser.add_argument("--no-write", action="store_true", help="(the default now; kept for old command lines)")
    common.docs_flags(parser, "one cold and one warm sample")
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 1
    load_start = common.load_average()
    t0 = time.time()
    config, env = trained_run(args.root, smoke=args.smoke)
    samples: dict[str, list[dict]] = {"cold": [], "warm": []}
    for _ in range(args.repeats):
        for mode in ("cold", "warm"):
            samples[mode].append(sample(mode, config, env))
    order = list(samples["cold"][0])
    before_warm = set(list(samples["warm"][0])[:list(samples["warm"][0]).index("warm: relaunch begins")])
    rows = []
    for phase in order:
        cold = summarize(s.get(phase) for s in samples["cold"])
        warm = [s[phase] for s in samples["warm"] if phase in s and phase not in before_warm]
        rows.append([phase, cold.text(), summarize(warm).text() if warm else "(done by the spare before)"])
    text = common.table(["phase (seconds since the relaunch began; median / worst (samples))", "cold", "warm spare"],
                        rows, right={1, 2})
    cold_total = summarize(s["first optimizer step done"] for s in samples["cold"])
    warm_total = summarize(s["first optimizer step done"] for s in samples["warm"])
    verdict = (f"relaunch -> first new optimizer step (progress = the first optimizer step done, not the first progress "
               f"line): cold median {cold_total.median:.2f} s, worst {cold_total.worst:.2f} s; warm spare median "
               f"{warm_total.median:.2f} s, worst {warm_total.worst:.2f} s ({args.repeats} samples each)")
    print("\n" + text + "\n\n" + verdict)
    (args.root / "results.json").write_text(json.dumps(samples, indent=1))
    if args.no_write or not common.should_write(args):
        return 0
    body = f"""Command: `{common.command_line()}` ({(time.time() - t0) / 60:.1f} min in all).

Machine: {common.machine(load_start)}.

Each sample is a fresh interpreter resuming the default tiny run (`configs/run_config.yaml`: 2 layers, 64 wide,
micro-batch 4, 4 micro-batches per step) from its step-20 checkpoint through runbook's entry path
(`benchmarks/relaunch_phases.py`), stopped once the first new optimizer step is done. cold: the clock starts
when the interpreter starts; warm: the imports (torch, lightning, litgpt, litdata) are done first, as a warm
spare has done them before the relaunch, and the clock starts after them. The watcher's own share of a
relaunch (its actions, the spare's hand-over, reading the progress line) is not in these figures: see the
latency section's `trainer restart s`, which is relaunch -> the first progress line as runbook read it.

{text}

{verdict}."""
    common.write_section(SECTION, body)
    print(f"\nwrote the '{SECTION}' section of {common.DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
