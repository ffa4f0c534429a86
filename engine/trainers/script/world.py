"""PURE. How many ranks one launch runs: read from the launcher's own flags in the argv (torchrun's
--nproc-per-node x --nnodes, accelerate's --num_processes, deepspeed's --num_gpus x --num_nodes), else
trainer.devices x trainer.num_nodes. batch_size is the global batch: each rank takes batch / world_size
sequences per optimizer step, so accumulation divides by it (2 ranks trained twice the batch before)."""

from __future__ import annotations

PER_NODE = ("--nproc-per-node", "--nproc_per_node", "--num_gpus", "--num-gpus")
NODES = ("--nnodes", "--num_nodes", "--num-nodes")
TOTAL = ("--num_processes", "--num-processes")


def _flag(argv: list[str], names: tuple[str, ...]) -> str | None:
    for i, item in enumerate(argv):
        for name in names:
            if item == name and i + 1 < len(argv):
                return argv[i + 1]
            if item.startswith(name + "="):
                return item.split("=", 1)[1]
    return None


def _count(text: str | None) -> int | None:
    """'2' -> 2; torchrun's elastic '1:4' -> 4 (the most it may run); anything else ('gpu', 'auto') -> None."""
    if text is None:
        return None
    last = text.split(":")[-1]
    return int(last) if last.isdigit() and int(last) > 0 else None


def world_size(argv: list[str], devices: int = 1, num_nodes: int = 1) -> int:
    """The launch's ranks: argv is the rendered command up to the script (the launcher's part)."""
    total = _count(_flag(argv, TOTAL))
    if total:
        return total
    per_node = _count(_flag(argv, PER_NODE))
    if per_node:
        return per_node * (_count(_flag(argv, NODES)) or 1)
    return devices * num_nodes
