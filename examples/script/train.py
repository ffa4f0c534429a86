"""A nanoGPT-style training script supervised by runbook as `kind: script` (docs/trainers.md).

Everything runbook needs is the contract in runbook/sdk.py: a progress line per optimizer step, a save
announced before it is written to <out>/step-<6 digits>/state.pt, a save and exit 75 on a notice, and
resume / micro-batch / lr taken as arguments (the run config's trainer.command templates them).
Byte-level (vocabulary 256), so it needs no tokenizer; the data are the .txt files of --train-dir.
Each step's sequences are drawn from a generator seeded by (seed, step): a resumed run sees exactly
the sequences an undisturbed one would, whatever its micro-batch. With --sequential the data are read in
order instead: data position p trains on the p-th run of batch x block bytes of the files, sorted by name
(so a block of junk in a file is reached at a known step: tests/trainers/test_skip_data_scenarios.py).

RUNBOOK_EXAMPLE_ACTIVATION_MB=N makes every micro-batch sample hold N MB more (think activations) from
step RUNBOOK_EXAMPLE_ACTIVATION_FROM_STEP on (default 1): a real allocation, which fails only where
memory is really short (trainer.memory_limit_mb). RUNBOOK_EXAMPLE_STEP_SECONDS=S makes every step take S seconds
more (think a bigger model: a test whose fault must outlast the watcher's poll).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

from runbook import sdk


class GPT(nn.Module):
    def __init__(self, block: int, width: int = 64, layers: int = 2, heads: int = 2, vocab: int = 256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(block, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(block), persistent=False)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        return self.head(self.blocks(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True))


def corpus(train_dir: Path) -> torch.Tensor:
    data = b"".join(p.read_bytes() for p in sorted(train_dir.rglob("*.txt")))
    return torch.tensor(list(data), dtype=torch.long)


def step_batch(data: torch.Tensor, seed: int, step: int, batch: int, block: int, sequential: bool = False):
    if sequential:   # position `step` (from 1): the step-th run of batch x block bytes, wrapping at the end
        runs = (len(data) - 1) // (batch * block)
        starts = ((step - 1) % runs) * batch * block + torch.arange(batch) * block
    else:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        starts = torch.randint(0, len(data) - block - 1, (batch,), generator=g)
    x = torch.stack([data[s:s + block] for s in starts])
    y = torch.stack([data[s + 1:s + block + 1] for s in starts])
    return x, y


def skipped_bytes(train_dir: Path, windows: list[tuple[int, int]], run_bytes: int) -> list[dict]:
    """Read in order, data positions a..b are bytes (a-1) x run .. b x run - 1 of the files end to end: each
    window's bytes, by file (the first pass over the data; a window past its end wraps and is not told)."""
    told, start = [], 0
    for path in sorted(train_dir.rglob("*.txt")):
        end = start + path.stat().st_size
        for a, b in windows:
            lo, hi = max(start, (a - 1) * run_bytes), min(end, b * run_bytes)
            if lo < hi:
                told.append({"file": str(path.relative_to(train_dir)), "bytes": f"{lo - start}-{hi - start - 1}"})
        start = end
    return told


def save(folder: Path, step: int, model, optimizer) -> None:
    sdk.saving(folder)                       # before the first byte: runbook may prune only what was announced
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".state.pt.tmp"
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, folder / "state.pt")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    for name, kind in (("out", Path), ("train-dir", Path), ("resume", Path)):
        p.add_argument(f"--{name}", type=kind)
    for name, kind, default in (("steps", int, 40), ("save-interval", int, 10), ("micro-batch", int, 4), ("batch", int, 16),
                                ("lr", float, 3e-3), ("seed", int, 1337), ("block", int, 64)):
        p.add_argument(f"--{name}", type=kind, default=default)
    p.add_argument("--sequential", action="store_true", help="read the data in order (see the module docstring)")
    a = p.parse_args(argv)
    torch.manual_seed(a.seed)
    sdk.watch_notice()
    data, model = corpus(a.train_dir), GPT(a.block)
    if a.sequential and (windows := sdk.skipped_windows()):   # what runbook's skip leaves out, in this data's terms
        sdk.data_skipped(positions=",".join(f"{x}-{y}" for x, y in windows),
                         files=skipped_bytes(a.train_dir, windows, a.batch * a.block))
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    start = 0
    if a.resume:
        state = torch.load(a.resume, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        sdk.resumed(a.resume)
    for group in optimizer.param_groups:
        group["lr"] = a.lr                   # the run config's lr wins over the one the checkpoint recorded
    extra_mb = int(os.environ.get("RUNBOOK_EXAMPLE_ACTIVATION_MB") or 0)
    extra_from = int(os.environ.get("RUNBOOK_EXAMPLE_ACTIVATION_FROM_STEP") or 1)
    accum = a.batch // a.micro_batch
    step_seconds = float(os.environ.get("RUNBOOK_EXAMPLE_STEP_SECONDS") or 0)
    for step in range(start + 1, a.steps + 1):
        x, y = step_batch(data, a.seed, sdk.data_position(step), a.batch, a.block, a.sequential)   # past any window runbook skipped
        total = 0.0
        for i in range(accum):
            armed = extra_mb and step >= extra_from
            held = torch.empty(extra_mb * a.micro_batch * 2**18) if armed else None   # 4-byte floats: N MB per sample
            xs, ys = x[i * a.micro_batch:(i + 1) * a.micro_batch], y[i * a.micro_batch:(i + 1) * a.micro_batch]
            loss = nn.functional.cross_entropy(model(xs).flatten(0, 1), ys.flatten()) / accum
            loss.backward()
            total += loss.item()
            del held
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        time.sleep(step_seconds)
        sdk.progress(step, total)
        if step % a.save_interval == 0 or sdk.notice():
            save(a.out / f"step-{step:06d}", step, model, optimizer)
        if sdk.notice() and step < a.steps:
            return sdk.NOTICE_EXIT
        if not math.isfinite(total):
            print(f"loss is not finite at step {step}", flush=True)
    save(a.out / "final", a.steps, model, optimizer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
