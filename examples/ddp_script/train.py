"""A plain DDP training script, run by a launcher (`torchrun --nproc-per-node 2 train.py ...`), supervised
by runbook as `kind: script` (docs/trainers.md). What a user writes: torch.distributed over gloo on a CPU
(NCCL on GPUs), DistributedDataParallel, each rank its share of the global batch, rank 0 saves.

runbook's contract is runbook/sdk.py: every rank calls sdk.progress() (rank 0 prints), rank 0 announces
and writes <out>/step-<6 digits>/state.pt, a notice saves and exits 75 on every rank. The global batch
(--batch) is split over the ranks: each takes batch / world sequences per step, in micro-batches, so
the run trains the same sequences per step whatever the number of ranks.

Faults a test sets from outside through the environment (a user's bug or a machine's trouble, for real):
RUNBOOK_EXAMPLE_BUG_AT_STEP=N with RUNBOOK_EXAMPLE_BUG_RANK=R: rank R raises in its own code at step N;
RUNBOOK_EXAMPLE_EXIT_AT_STEP=N with RUNBOOK_EXAMPLE_EXIT_RANK=R: rank R returns 0 early at step N;
RUNBOOK_EXAMPLE_ACTIVATION_MB=M with RUNBOOK_EXAMPLE_ACTIVATION_RANK=R: rank R holds M MB more per sample
from step RUNBOOK_EXAMPLE_ACTIVATION_FROM_STEP on (a real allocation: it fails under a memory limit).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

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


def step_batch(data: torch.Tensor, seed: int, step: int, batch: int, block: int):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(data) - block - 1, (batch,), generator=g)
    return (torch.stack([data[s:s + block] for s in starts]), torch.stack([data[s + 1:s + block + 1] for s in starts]))


def fault(name: str, rank: int, step: int) -> bool:
    at = os.environ.get(f"RUNBOOK_EXAMPLE_{name}_AT_STEP")
    return at is not None and step == int(at) and rank == int(os.environ.get(f"RUNBOOK_EXAMPLE_{name}_RANK", "0"))


def save(folder: Path, step: int, model, optimizer) -> None:
    if dist.get_rank() == 0:
        sdk.saving(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / ".state.pt.tmp"
        torch.save({"step": step, "model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
        os.replace(tmp, folder / "state.pt")
    dist.barrier()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    for name, kind in (("out", Path), ("train-dir", Path), ("resume", Path)):
        p.add_argument(f"--{name}", type=kind)
    for name, kind, default in (("steps", int, 40), ("save-interval", int, 10), ("micro-batch", int, 4), ("batch", int, 16),
                                ("lr", float, 3e-3), ("seed", int, 1337), ("block", int, 64)):
        p.add_argument(f"--{name}", type=kind, default=default)
    a = p.parse_args(argv)
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.seed)
    sdk.watch_notice()
    data = torch.tensor(list(b"".join(p.read_bytes() for p in sorted(a.train_dir.rglob("*.txt")))), dtype=torch.long)
    model = DistributedDataParallel(GPT(a.block))
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    start = 0
    if a.resume:
        state = torch.load(a.resume, map_location="cpu", weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        sdk.resumed(a.resume)
    for group in optimizer.param_groups:
        group["lr"] = a.lr
    per_rank = a.batch // world
    accum = per_rank // a.micro_batch
    extra_mb = int(os.environ.get("RUNBOOK_EXAMPLE_ACTIVATION_MB") or 0)
    extra_from = int(os.environ.get("RUNBOOK_EXAMPLE_ACTIVATION_FROM_STEP") or 1)
    extra_rank = int(os.environ.get("RUNBOOK_EXAMPLE_ACTIVATION_RANK") or 0)
    for step in range(start + 1, a.steps + 1):
        if fault("EXIT", rank, step):
            return 0                                  # a rank that returns early: its peers wait on it
        x, y = step_batch(data, a.seed, sdk.data_position(step), a.batch, a.block)   # past any window runbook skipped
        x, y = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        total = torch.zeros(())
        for i in range(accum):
            held = torch.empty(extra_mb * a.micro_batch * 2**18) if extra_mb and rank == extra_rank and step >= extra_from else None
            xs, ys = x[i * a.micro_batch:(i + 1) * a.micro_batch], y[i * a.micro_batch:(i + 1) * a.micro_batch]
            loss = nn.functional.cross_entropy(model(xs).flatten(0, 1), ys.flatten()) / accum
            loss.backward()
            total += loss.detach()
            del held
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dist.all_reduce(total)
        sdk.progress(step, total.item() / world)
        if fault("BUG", rank, step):
            raise RuntimeError(f"the user's own bug at step {step}")
        stop = torch.tensor(int(sdk.notice()))
        dist.all_reduce(stop)                          # a notice to any rank stops every rank after this step
        if step % a.save_interval == 0 or stop.item():
            save(a.out / f"step-{step:06d}", step, model, optimizer)
        if stop.item() and step < a.steps:
            dist.destroy_process_group()
            return sdk.NOTICE_EXIT
    save(a.out / "final", a.steps, model, optimizer)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
