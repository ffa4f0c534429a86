"""A toy trainer: "trains" a few numbers deterministically, so a resumed run ends bit-identical to an
undisturbed one. Its own formats on purpose (not litgpt's): progress lines ``toy step N/M loss L
took T ms``, checkpoints ``<out_dir>/ckpt-NNNNNN/state.json`` + ``state.sha256``, and a save
announced as ``toy: saving <folder>`` before any of its files is written.

Usage: python trainer.py CONFIG.json   (written by adapter.py: out_dir, steps, save_interval,
step_seconds, seed, resume, micro_batch_size). step_seconds paces each step, so tests have time to
signal it; oom_above_micro_batch makes a larger micro-batch fail at start as an OOM would; env_file
names a file each launch appends its environment to (one JSON line); save_seconds makes each save
write its file in pieces over that long; validate_interval and validate_seconds make it validate (litgpt's
`Validating ...`, then that long computing in silence, then ``toy val step N val_loss L``) after every
validate_interval-th step; slow_from_scratch_only: true makes a resumed launch save and validate at once
(a test about the first launch's slow save or validation need not wait through the relaunch's). max_weight
is the largest weight its number format holds (65504: half precision): a weight beyond it is inf, so a run
at a too-high lr goes non-finite within a dozen steps, as a real one does. RUNBOOK_TOY_HOLD_AT_STEP=N (set
by tests/failing_litgpt/wrapper.py) makes it stop after logging step N, until it is killed. lr_jump
({"at_step": N, "lr": X}) trains with lr X from update N on: above 2 the weights' error grows by |1 - X| a step,
so the loss climbs from there, deterministically (a schedule gone wrong near the end of a run). poison
({"from": a, "until": b, "lr": X}) does the same for the updates that train on data positions a..b (a bad window
of data): step s trains on position s, or past the windows runbook skipped (RUNBOOK_DATA_SKIP).

A notice (a signal named in RUNBOOK_NOTICE_SIGNALS, as runbook sets it for every trainer that takes
notices) is litgpt's notice save under runbook, the toy's way: the step in progress ends, is saved as
its own checkpoint, and the trainer exits SAVED_ON_NOTICE (75). ``notice_save: false`` in the config
makes it die of the signal instead (a trainer that takes no notices: the steps since its last save
are lost). start_error ({"line": L, "after_seconds": S}) makes every launch print L as a traceback's last line
after S seconds and exit 1, before its first step (a deterministic start-up failure).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

STATE_NAME, CHECKSUM_NAME = "state.json", "state.sha256"
SIZE = 8
SAVED_ON_NOTICE = 75   # engine/core/exit_codes.py (the toy imports nothing of runbook's)
NOTICE_SIGNALS_ENV = "RUNBOOK_NOTICE_SIGNALS"
_noticed: list[int] = []


def data_windows():
    """engine/core/data_windows.py by its path (the toy imports nothing of runbook's by name): how a step maps to
    a data position once runbook skipped a window (RUNBOOK_DATA_SKIP)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "engine" / "core" / "data_windows.py"
    spec = importlib.util.spec_from_file_location("_toy_data_windows", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def targets() -> list[float]:
    return [math.sin(i + 1) for i in range(SIZE)]


def initial_state(seed: int) -> dict:
    return {"step": 0, "weights": [math.cos(seed * (i + 1)) for i in range(SIZE)]}


def train_step(state: dict, lr: float, max_weight: float = math.inf) -> float:
    """One deterministic update towards the targets, with a step-dependent wobble; returns the loss. A weight
    beyond max_weight overflows to inf (as one beyond 65504 does in half precision), and the next update
    makes it nan (inf - inf)."""
    step = state["step"] + 1
    weights = [w - lr * (w - t) + 1e-3 * math.sin(7 * step + i) for i, (w, t) in enumerate(zip(state["weights"], targets()))]
    weights = [math.copysign(math.inf, w) if abs(w) > max_weight else w for w in weights]
    state.update(step=step, weights=weights)
    return sum((w - t) ** 2 for w, t in zip(weights, targets())) / SIZE


def encode(state: dict) -> bytes:
    return json.dumps(state, sort_keys=True).encode()   # floats round-trip exactly through JSON


def save(folder: Path, state: dict, seconds: float = 0.0) -> None:
    """`seconds` spreads the write over that long, in 20 pieces (a big model's save, still writing)."""
    print(f"toy: saving {folder}", flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    data = encode(state)
    tmp = folder / f".{STATE_NAME}.tmp"
    with open(tmp, "wb", buffering=0) as fh:
        pieces = 20 if seconds > 0 else 1
        size = -(-len(data) // pieces)
        for start in range(0, len(data), size):
            fh.write(data[start:start + size])
            time.sleep(seconds / pieces)
    os.replace(tmp, folder / STATE_NAME)
    (folder / CHECKSUM_NAME).write_text(hashlib.sha256(data).hexdigest() + "\n")


def validation_loss(state: dict) -> float:
    """The distance to targets shifted by a fixed offset: a held-out loss that falls as the run learns."""
    return sum((w - t - 0.05) ** 2 for w, t in zip(state["weights"], targets())) / SIZE


def validate(state: dict, seconds: float) -> None:
    """litgpt's announcement, then CPU work and nothing printed for `seconds`, as a real validation."""
    print("Validating ...", flush=True)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        sum(range(10_000))
    print(f"toy validation took {seconds:.1f} s", flush=True)
    print(f"toy val step {state['step']} val_loss {validation_loss(state):.6f}", flush=True)


def take_notices(enabled: bool) -> None:
    """Catch the notice signals runbook names: the loop saves the step in progress and exits 75."""
    names = os.environ.get(NOTICE_SIGNALS_ENV, "") if enabled else ""
    for name in filter(None, (n.strip() for n in names.split(","))):
        signal.signal(getattr(signal, name), lambda signum, _frame: _noticed.append(signum))


def load(path: Path) -> dict:
    data = path.read_bytes()
    expected = (path.parent / CHECKSUM_NAME).read_text().strip()
    if hashlib.sha256(data).hexdigest() != expected:
        raise SystemExit(f"toy: checkpoint {path} is corrupt (sha256 mismatch)")
    return json.loads(data)


def main(config_path: str) -> int:
    cfg = json.loads(Path(config_path).read_text())
    out_dir = Path(cfg["out_dir"])
    if cfg.get("env_file"):   # one JSON line per launch: the environment this trainer was given
        with open(cfg["env_file"], "a") as fh:
            fh.write(json.dumps(dict(os.environ)) + "\n")
    # {"line": L, "after_seconds": S, "resumed_only": B}: every launch (B: every resumed one) dies of L before its first step
    start_error = cfg.get("start_error")
    if start_error and (cfg.get("resume") or not start_error.get("resumed_only")):
        time.sleep(float(start_error.get("after_seconds", 0.0)))
        print("Traceback (most recent call last):", flush=True)
        print(start_error["line"], flush=True)
        return 1
    limit = cfg.get("oom_above_micro_batch")
    if limit is not None and cfg.get("micro_batch_size", 0) > limit:   # a memory limit, the toy's way
        print(f"MemoryError: toy cannot fit micro-batch {cfg['micro_batch_size']} (limit {limit})", flush=True)
        return 1
    if cfg.get("resume"):
        state = load(Path(cfg["resume"]))
        print(f"toy: resuming from {cfg['resume']}", flush=True)
    else:
        state = initial_state(cfg["seed"])
    if cfg.get("resume") and cfg.get("slow_from_scratch_only"):
        cfg.update(save_seconds=0.0, validate_seconds=0.0)
    hold_at = int(os.environ["RUNBOOK_TOY_HOLD_AT_STEP"]) if os.environ.get("RUNBOOK_TOY_HOLD_AT_STEP") else None
    take_notices(cfg.get("notice_save", True))
    windows = data_windows()
    skipped = windows.parse(os.environ.get(windows.ENV))
    if skipped:
        print(f"toy: skipping data positions {windows.format_windows(skipped)}", flush=True)
        print(windows.report_line({"positions": windows.format_windows(skipped), "of": "the toy's data positions"}),
              flush=True)
    while state["step"] < cfg["steps"]:
        started = time.monotonic()
        time.sleep(cfg["step_seconds"])
        jump = cfg.get("lr_jump")   # {"at_step": N, "lr": X}: a schedule gone wrong, from update N on
        lr = jump["lr"] if jump and state["step"] + 1 >= jump["at_step"] else cfg["lr"]
        poison = cfg.get("poison")   # {"from": a, "until": b, "lr": X}: the data positions a..b make the update X's
        if poison and poison["from"] <= windows.position(state["step"] + 1, skipped) <= poison["until"]:
            lr = poison["lr"]
        loss = train_step(state, lr, cfg.get("max_weight", math.inf))
        took_ms = (time.monotonic() - started) * 1000
        print(f"toy step {state['step']}/{cfg['steps']} loss {loss:.6f} took {took_ms:.1f} ms", flush=True)
        if hold_at is not None and state["step"] >= hold_at:
            while True:   # tests/failing_litgpt/wrapper.py kills it here: it cannot run ahead of the wrapper
                time.sleep(60)
        if cfg.get("validate_interval") and state["step"] % cfg["validate_interval"] == 0:
            validate(state, cfg.get("validate_seconds", 0.0))
        if state["step"] % cfg["save_interval"] == 0 or _noticed:
            save(out_dir / f"ckpt-{state['step']:06d}", state, cfg.get("save_seconds", 0.0))
        if _noticed:
            print(f"toy: saved step {state['step']} on notice signal {_noticed[0]}, exiting {SAVED_ON_NOTICE}", flush=True)
            return SAVED_ON_NOTICE
    save(out_dir / "final", state, cfg.get("save_seconds", 0.0))
    print(f"toy: done at step {state['step']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
