"""Several ranks under a launcher, side by side with what a user would run instead (issue 43).

The same DDP script (examples/ddp_script/train.py: 2 ranks over gloo, 48 steps, a checkpoint every 4), the
same faults after step 12, one run each, repeated:

    runbook      `runbook watch` of `kind: script` whose command is torchrun (tests/cluster/test_launcher_ranks.py)
    torchrun     `torchrun --standalone --max-restarts 3` of benchmarks/peers/resume_newest.py (the script,
                 resumed from the newest checkpoint on every start: what a careful user does without runbook)
    ft_launcher  NVIDIA's `ft_launcher` (nvidia-resiliency-ext) with --max-restarts 3 and its rank heartbeat
                 client (the same wrapper, RUNBOOK_BENCH_FT_HEARTBEAT=1); left out when it is not installed

Faults: `sigkill` (rank 1 SIGKILLed), `hang` (rank 1 SIGSTOPped), `bug` (rank 0 raises in the script's own
code at step 12: a restart meets it again), `notice` (SIGTERM to the launcher, as a scheduler's preemption).

Figures per cell (median of --samples): completed (final/state.pt and exit 0), fault to detection (runbook:
the incident's detected_at; the others: the restarted rank 0's first heartbeat), fault to next progress
(the first step trained after the fault), steps lost (trained before the fault and trained again), restarts,
and for the bug whether it looped (restarted more than once). Every rank's heartbeat (runbook/sdk.py, under
every launcher) is the harness's clock: (time, pid, step) sampled every 50 ms.

    pip install --no-deps --target /tmp/nvrx nvidia-resiliency-ext nvidia-ml-py defusedxml   # kept apart from .venv
    python benchmarks/bench_multirank.py --root /tmp/multirank --samples 3 --nvrx-site /tmp/nvrx --write
    python benchmarks/bench_multirank.py --smoke --root /tmp/multirank-smoke     # runbook x sigkill, once
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, load_average, publish, table  # noqa: E402

EXAMPLE = ROOT / "examples" / "ddp_script" / "train.py"
WRAPPER = ROOT / "benchmarks" / "peers" / "resume_newest.py"
STEPS, SAVE_INTERVAL, BATCH, MICRO, BLOCK, FAULT_STEP = 48, 4, 8, 4, 32, 12
FAULTS = ("sigkill", "hang", "bug", "notice")
TIMEOUT_S = 300.0
SECTION = "Several ranks under a launcher: runbook, torchrun --max-restarts, ft_launcher"


def corpus_text() -> str:
    import argparse as a
    import json as j
    import textwrap as t

    return "".join(inspect.getsource(m) for m in (j.decoder, j.encoder, a, t))


def script_args(out: Path, train: Path) -> list[str]:
    return ["--out", str(out), "--train-dir", str(train), "--steps", str(STEPS), "--save-interval", str(SAVE_INTERVAL),
            "--micro-batch", str(MICRO), "--batch", str(BATCH), "--lr", "0.003", "--seed", "1337", "--block", str(BLOCK)]


@dataclass
class Cell:
    tool: str
    fault: str
    completed: bool = False
    detect_s: float | None = None
    progress_s: float | None = None
    steps_lost: int | None = None
    restarts: int = 0
    note: str = ""


@dataclass
class Beats:
    """Rank 0's heartbeats, sampled: (wall time, pid, step) whenever one changes."""
    seen: list[tuple[float, int, int | None]] = field(default_factory=list)


def sample(find_beat, beats: Beats, stop: threading.Event) -> None:
    last = None
    while not stop.is_set():
        beat = find_beat()
        if beat is not None:
            key = (beat.get("pid"), beat.get("step"))
            if key != last:
                beats.seen.append((float(beat.get("time") or time.time()), int(beat["pid"]), beat.get("step")))
                last = key
        time.sleep(0.05)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def newest_beat(run_dir: Path, rank: int) -> dict | None:
    """Rank `rank`'s heartbeat in runbook's newest launch (launches/launch-NNN/ranks/)."""
    paths = sorted((run_dir / "launches").glob(f"launch-*/ranks/rank-{rank}.json"))
    return read_json(paths[-1]) if paths else None


def inject(fault: str, run: Path, launcher_pid, rank_beat) -> float | None:
    """Wait for step FAULT_STEP on rank 1, then break it; the fault's wall time (None: never got there)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        beat = rank_beat(1)
        if beat and (beat.get("step") or 0) >= FAULT_STEP:
            break
        time.sleep(0.05)
    else:
        return None
    if fault == "bug":
        return time.time()   # armed through the environment: rank 0 raises at FAULT_STEP by itself
    if fault == "notice":
        os.kill(launcher_pid(), signal.SIGTERM)
    else:
        os.kill(beat["pid"], signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP)
    return time.time()


def figures(cell: Cell, beats: Beats, fault_at: float | None) -> None:
    if fault_at is None:
        cell.note = "fault never injected"
        return
    before = [b for b in beats.seen if b[0] <= fault_at and b[2] is not None]
    fault_pid = before[-1][1] if before else None
    last_step = max((b[2] for b in before), default=0)
    after = [b for b in beats.seen if b[0] > fault_at and b[1] != fault_pid]
    pids = []
    for _, pid, _ in beats.seen:
        if pid not in pids:
            pids.append(pid)
    cell.restarts = max(0, len(pids) - 1)
    if after and cell.detect_s is None:
        cell.detect_s = round(after[0][0] - fault_at, 1)
    trained = [b for b in after if b[2] is not None]
    if trained:
        cell.progress_s = round(trained[0][0] - fault_at, 1)
        cell.steps_lost = max(0, last_step - (trained[0][2] - 1))


def run_runbook(fault: str, root: Path, train: Path) -> Cell:
    project = root / "project"
    (project / "configs").mkdir(parents=True)
    env = {"OMP_NUM_THREADS": "1"}
    if fault == "bug":
        env.update(RUNBOOK_EXAMPLE_BUG_AT_STEP=str(FAULT_STEP), RUNBOOK_EXAMPLE_BUG_RANK="0")
    command = ["{python}", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(EXAMPLE),
               "--out", "{out_dir}", "--train-dir", "{train_dir}", "--steps", "{max_steps}", "--save-interval",
               "{save_interval}", "--micro-batch", "{micro_batch_size}", "--batch", "{batch_size}", "--lr", "{lr}",
               "--seed", "{seed}", "--block", "{block_size}"]
    config = {"micro_batch_size": MICRO, "batch_size": BATCH, "lr": 0.003, "save_interval": SAVE_INTERVAL,
              "keep_last_k": 20, "seed": 1337, "max_tokens": STEPS * BATCH * BLOCK, "out_dir": "checkpoints/pretrain",
              "run_log": "docs/run-log.md", "run_dir": "runs/pretrain", "model": {"block_size": BLOCK},
              "data": {"train_dir": str(train), "val_dir": str(train), "tokenizer_dir": "data/tokenizer",
                       "make_default": False},
              "trainer": {"kind": "script", "device": "cpu", "env": env, "command": command},
              "watch": {"poll_interval_s": 0.2, "hang_timeout_s": 60, "grace_period_s": 10, "hang_floor_s": 10}}
    (project / "configs" / "run_config.yaml").write_text(json.dumps(config, indent=1))
    run_dir = project / "runs" / "pretrain"
    cell, beats, stop = Cell("runbook", fault), Beats(), threading.Event()
    log = open(root / "watch.log", "wb")
    watcher = subprocess.Popen([sys.executable, "-m", "runbook.cli", "watch", "configs/run_config.yaml"], cwd=project,
                               stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    thread = threading.Thread(target=sample, args=(lambda: newest_beat(run_dir, 0),
                                                  beats, stop), daemon=True)
    thread.start()
    fault_at = inject(fault, run_dir, lambda: int((run_dir / "trainer.pid").read_text()),
                      lambda r: newest_beat(run_dir, r))
    try:
        code = watcher.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        watcher.kill()
        code = -1
    stop.set()
    thread.join()
    incidents = [read_json(p) or {} for p in sorted((run_dir / "incidents").glob("incident-*.json"))]
    cell.completed = code == 0 and (project / "checkpoints" / "pretrain" / "final" / "state.pt").is_file()
    if incidents and fault_at is not None and incidents[0].get("detected_at"):
        cell.detect_s = round(incidents[0]["detected_at"] - fault_at, 1)
    figures(cell, beats, fault_at)
    cell.note = ", ".join(f"{i.get('playbook')} -> {i.get('outcome')}" for i in incidents) + f"; watch exit {code}"
    return cell


def run_peer(tool: str, fault: str, root: Path, train: Path, nvrx_site: Path | None = None) -> Cell:
    out, ranks = root / "out", root / "ranks"
    ranks.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "RUNBOOK_RANKS_DIR": str(ranks)}
    if fault == "bug":
        env.update(RUNBOOK_EXAMPLE_BUG_AT_STEP=str(FAULT_STEP), RUNBOOK_EXAMPLE_BUG_RANK="0")
    if tool == "torchrun":
        head = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "3"]
    else:
        assert nvrx_site is not None
        env["RUNBOOK_BENCH_FT_HEARTBEAT"] = "1"
        env["PYTHONPATH"] = f"{ROOT}:{nvrx_site}"
        head = [sys.executable, str(nvrx_site / "bin" / "ft_launcher"), "--standalone", "--nproc-per-node", "2", "--max-restarts", "3",
                "--ft-param-initial_rank_heartbeat_timeout", "60", "--ft-param-rank_heartbeat_timeout", "15"]
    cell, beats, stop = Cell(tool, fault), Beats(), threading.Event()
    log = open(root / "launcher.log", "wb")
    proc = subprocess.Popen([*head, str(WRAPPER), str(EXAMPLE), *script_args(out, train)], cwd=root, stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    thread = threading.Thread(target=sample, args=(lambda: read_json(ranks / "rank-0.json"), beats, stop), daemon=True)
    thread.start()
    fault_at = inject(fault, root, lambda: proc.pid, lambda r: read_json(ranks / f"rank-{r}.json"))
    try:
        code = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = -1
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # the launcher and whatever it left
        except ProcessLookupError:
            pass
    stop.set()
    thread.join()
    cell.completed = code == 0 and (out / "final" / "state.pt").is_file()
    figures(cell, beats, fault_at)
    cell.note = f"exit {code}"
    return cell


def median(values: list) -> str:
    known = [v for v in values if v is not None]
    return "-" if not known else f"{statistics.median(known):g}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="runbook x sigkill, once; nothing written")
    p.add_argument("--write", action="store_true")
    p.add_argument("--tools", default="runbook,torchrun,ft_launcher")
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--nvrx-site", type=Path, help="a folder holding nvidia-resiliency-ext (pip install --target): "
                   "ft_launcher's rows; without it they are left out")
    args = p.parse_args(argv)
    load = load_average()
    tools = ["runbook"] if args.smoke else args.tools.split(",")
    faults = ["sigkill"] if args.smoke else args.faults.split(",")
    samples = 1 if args.smoke else args.samples
    if "ft_launcher" in tools and not (args.nvrx_site and (args.nvrx_site / "nvidia_resiliency_ext").is_dir()):
        tools.remove("ft_launcher")
        print("ft_launcher: no --nvrx-site holding nvidia-resiliency-ext; its rows are left out")
    if args.root.exists():
        shutil.rmtree(args.root)
    train = args.root / "data"
    train.mkdir(parents=True)
    (train / "corpus.txt").write_text(corpus_text())
    cells: dict[tuple[str, str], list[Cell]] = {}
    for n in range(samples):
        for fault in faults:
            for tool in tools:
                where = args.root / f"{tool}-{fault}-{n}"
                where.mkdir()
                cell = (run_runbook(fault, where, train) if tool == "runbook"
                        else run_peer(tool, fault, where, train, args.nvrx_site))
                cells.setdefault((tool, fault), []).append(cell)
                print(f"{tool} x {fault} #{n + 1}: completed {cell.completed}, detect {cell.detect_s} s, next progress "
                      f"{cell.progress_s} s, steps lost {cell.steps_lost}, restarts {cell.restarts} ({cell.note})", flush=True)
    rows = []
    for (tool, fault), runs in cells.items():
        done = sum(c.completed for c in runs)
        loops = "yes" if fault == "bug" and any(c.restarts > 1 for c in runs) else ("no" if fault == "bug" else "")
        rows.append([tool, fault, f"{done}/{len(runs)}", median([c.detect_s for c in runs]),
                     median([c.progress_s for c in runs]), median([c.steps_lost for c in runs]),
                     median([c.restarts for c in runs]), loops, runs[0].note])
    report = table(["tool", "fault", "completed", "fault -> detection s", "fault -> next progress s", "steps lost",
                    "restarts", "bug loops", "outcome (first run)"], rows, right={2, 3, 4, 5, 6})
    publish(args, SECTION, load,
            f"2 ranks of examples/ddp_script/train.py over gloo, {STEPS} steps, a checkpoint every {SAVE_INTERVAL}, "
            f"faults after step {FAULT_STEP}; medians of {samples} run(s) per cell.", report)
    if args.smoke and not cells[("runbook", "sigkill")][0].completed:
        print(f"the smoke's run did not complete: {cells}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
