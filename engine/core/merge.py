"""The one recursive dict merge: run-config overrides, playbook tests' partial snapshots, a
trainer's `extra` settings and a drill's fault settings all layer mappings the same way."""

from __future__ import annotations

from typing import Any, Mapping


def deep_merge(base: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict: `updates` on top of `base`, mappings merged key by key, anything else (lists
    included) replaced. Neither argument is changed; values not merged are shared, not copied."""
    merged = dict(base)
    for key, value in updates.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
