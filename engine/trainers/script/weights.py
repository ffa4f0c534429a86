"""Reading a checkpoint's tensors for NaN/Inf (torch and safetensors imported only here, when asked)."""

from __future__ import annotations

from pathlib import Path


def tensors_of(path: Path, key: str | None) -> dict:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        return load_file(str(path))
    import torch
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state[key] if key and isinstance(state, dict) and key in state else state


def nonfinite_names(path: Path, key: str | None, limit: int) -> list[str]:
    import torch
    found = []
    for name, value in tensors_of(path, key).items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            found.append(name)
            if len(found) >= limit:
                break
    return found
