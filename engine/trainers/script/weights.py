"""Reading a checkpoint's tensors for NaN/Inf (torch, numpy and safetensors imported only here, when asked).

A user's torch.save holds more than tensors: argparse's Namespace, pathlib paths, numpy scalars and arrays.
torch's weights_only unpickler reads them with just those classes and functions allowed (each builds a value,
none calls into other code); anything else, e.g. a reduce naming os.system, is refused, never run. What cannot
be read raises UnreadableWeights, which the rollback tells from non-finite weights."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from engine.checkpoints.rollback import UnreadableWeights

MAX_DEPTH = 64   # nesting of containers walked for tensors


def allowed_globals() -> list:
    """What people save beside tensors, for torch.serialization.safe_globals (torch's tensor rebuilds are in already)."""
    import argparse
    import pathlib

    import numpy
    scalar = numpy.float64(0).__reduce__()[0]               # numpy._core.multiarray.scalar
    reconstruct = numpy.zeros(0).__reduce__()[0]            # numpy._core.multiarray._reconstruct
    dtypes = {type(numpy.dtype(code)) for code in numpy.typecodes["All"]}   # numpy.dtypes.Int64DType, ...
    return [argparse.Namespace, pathlib.PurePosixPath, pathlib.PosixPath, pathlib.PureWindowsPath,
            numpy.dtype, *sorted(dtypes, key=str), numpy.ndarray, scalar, reconstruct,
            # numpy 1 wrote numpy.core.*: the same functions under the names its files carry
            (scalar, "numpy.core.multiarray.scalar"), (reconstruct, "numpy.core.multiarray._reconstruct")]


def read_saved(path: Path) -> object:
    import torch
    try:
        with torch.serialization.safe_globals(allowed_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any failure to read is "cannot read", said in one line
        raise UnreadableWeights(f"{path.name}: cannot read: {why_unreadable(error)}") from None


def why_unreadable(error: Exception) -> str:
    """PURE. torch's weights_only message is a page; its point is the global it refused."""
    refused = re.search(r"GLOBAL (\S+)|but got <class '([^']+)'>", str(error))
    if refused:
        return f"it holds {refused.group(1) or refused.group(2)}, which runbook does not unpickle (loading it could run code)"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {(lines[-1] if lines else '')[:160]}"


def tensors_of(path: Path, key: str | None) -> Iterator[tuple[str, object]]:
    """(dotted name, tensor) of every tensor in the file, or in its `key` when given."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        yield from load_file(str(path)).items()
        return
    import torch
    saved = read_saved(path)
    if key is not None:
        if not isinstance(saved, Mapping) or key not in saved:
            keys = sorted(map(str, saved))[:10] if isinstance(saved, Mapping) else type(saved).__name__
            bare = isinstance(saved, Mapping) and any(isinstance(v, torch.Tensor) for v in saved.values())
            raise UnreadableWeights(f"{path.name}: no key {key!r} (trainer.weights_key); its keys: {keys}"
                                    + ("; it is a state dict itself: set trainer.weights_key: null" if bare else ""))
        saved = saved[key]
    yield from _walk(saved, "", 0)


def _walk(value: object, name: str, depth: int) -> Iterator[tuple[str, object]]:
    import torch
    if isinstance(value, torch.Tensor):
        yield name, value
    elif depth < MAX_DEPTH and isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk(v, f"{name}.{k}" if name else str(k), depth + 1)
    elif depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk(v, f"{name}.{i}" if name else str(i), depth + 1)


def nonfinite_names(path: Path, key: str | None, limit: int) -> list[str]:
    """Names of the floating tensors holding NaN/Inf, at most `limit`; UnreadableWeights when there is nothing
    to scan (a file that cannot be read, a weights_key naming no key, no floating-point tensor at all)."""
    import torch
    found: list[str] = []
    scanned = 0
    for name, value in tensors_of(path, key):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            scanned += 1
            if not bool(torch.isfinite(value).all()):
                found.append(name)
                if len(found) >= limit:
                    break
    if not scanned:
        raise UnreadableWeights(f"{path.name}: no floating-point tensor{f' under {key!r}' if key else ''} to scan "
                                "(trainer.weights_key names the state dict)")
    return found
