"""The user's own litgpt pretrain YAML as the base of a run (`trainer.litgpt_config`).

One source of truth: the hyperparameters runbook reads and changes (micro_batch_size, batch_size,
lr, save_interval, max_tokens, seed, out_dir, the TextFiles folders and the tokenizer) live in the
litgpt YAML. They are read from it when the run config loads (overlay), written back to it, comments
kept, when a recovery changes one (write_values), and the launch config is the user's YAML with
only what supervision needs set on top (launch_config). Relative paths in it are relative to the
project folder, where litgpt runs.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

from engine.core.durable import atomic_write_text
from engine.core.merge import deep_merge
from engine.core.yaml_source import SourceError, load_yaml, locate, plain, round_trip_yaml, write_yaml_places
from engine.core.config import LoadedConfig, RunConfig
from engine.trainers.litgpt.settings_of import trainer_settings

TEXT_FILES = "litgpt.data.TextFiles"
# runbook key -> where litgpt keeps it.
OWNED = {
    "micro_batch_size": ("train", "micro_batch_size"),
    "batch_size": ("train", "global_batch_size"),
    "lr": ("optimizer", "init_args", "lr"),
    "save_interval": ("train", "save_interval"),
    "max_tokens": ("train", "max_tokens"),
    "seed": ("seed",),
    "out_dir": ("out_dir",),
}
DATA_OWNED = {"train_dir": ("data", "init_args", "train_data_path"), "val_dir": ("data", "init_args", "val_data_path"),
              "tokenizer_dir": ("tokenizer_dir",)}


def _get(tree: Any, keys: tuple) -> Any:
    for key in keys:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def read(path: Path) -> dict:
    tree = load_yaml(path)
    if not isinstance(tree, dict):
        raise SourceError([f"{path}:1:1: a litgpt pretrain config must be a mapping of keys to values"])
    return plain(tree)


def block_size(litgpt: dict) -> int:
    """The sequence length litgpt trains at: train.max_seq_length, else the model's block size."""
    if seq := _get(litgpt, ("train", "max_seq_length")):
        return int(seq)
    if isinstance(litgpt.get("model_config"), dict) and "block_size" in litgpt["model_config"]:
        return int(litgpt["model_config"]["block_size"])
    from litgpt.config import Config   # config only: no weights are read or fetched

    return Config.from_name(litgpt["model_name"], **(litgpt.get("model_config") or {})).block_size


def effective(litgpt: dict, extra: dict) -> dict:
    """PURE. What litgpt receives before runbook's own settings: the user's YAML, trainer.extra on top."""
    return deep_merge(litgpt, extra or {})


def managed_in_extra(extra: dict) -> dict[tuple, list[str]]:
    """PURE. The places in trainer.extra that would set or replace a value runbook manages (OWNED), each
    with the runbook keys it hides: `optimizer: {init_args: {lr: 10}}` -> {("optimizer", "init_args",
    "lr"): ["lr"]}; `optimizer: AdamW` replaces the whole optimizer, lr included. extra is merged over
    runbook's values at every launch, so a recovery's change to such a key would never reach the trainer."""
    found: dict[tuple, list[str]] = {}
    for key, place in OWNED.items():
        node = extra
        for depth, part in enumerate(place):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
            if depth == len(place) - 1 or not isinstance(node, dict):
                found.setdefault(place[:depth + 1], []).append(key)
                break
    return found


def extra_problems(extra: dict, config_path: Path, litgpt_path: Path | None) -> list[str]:
    """One `file:line:col` sentence per place of trainer.extra that managed_in_extra finds."""
    if not isinstance(extra, dict):
        return []
    problems = []
    for place, keys in managed_in_extra(extra).items():
        homes = ", ".join(f"{'.'.join(OWNED[k])} in {litgpt_path}" if litgpt_path else f"`{k}` in this run config"
                          for k in keys)
        problems.append(f"{line_of(config_path, ('trainer', 'extra', *place))}: trainer.extra.{'.'.join(place)}: "
                        f"{', '.join(keys)} is managed by runbook ({homes}); trainer.extra is laid over it at every "
                        "launch, so a recovery's change would never reach the trainer. Remove it from trainer.extra")
    return problems


def overlay(tree: dict, litgpt_path: Path, config_path: Path) -> dict:
    """The run config's tree with the keys the litgpt YAML owns taken from it (a SourceError when the
    run config sets one too, or the YAML lacks one runbook needs)."""
    litgpt = effective(read(litgpt_path), (tree.get("trainer") or {}).get("extra") or {})
    data = litgpt.get("data")
    if not (isinstance(data, dict) and isinstance(data.get("class_path"), str)):
        place = line_of(litgpt_path, ("data",))
        raise SourceError([f"{place}: data must name a data module (class_path, init_args), e.g. {TEXT_FILES} with "
                           "train_data_path and val_data_path, or litgpt.data.LitData with data_path; litgpt's "
                           "default would download a dataset"])
    text_files = data["class_path"] == TEXT_FILES
    out = dict(tree)
    for key, where in OWNED.items():
        if key in tree:
            raise SourceError([f"{config_path}: {key} is set both here and in {litgpt_path} "
                               f"({'.'.join(where)}); keep it only in the litgpt config"])
        value = _get(litgpt, where)
        if value is None and key in ("micro_batch_size", "batch_size", "lr", "max_tokens"):
            raise SourceError([f"{litgpt_path}: {'.'.join(where)} is not set; runbook needs it to plan and recover the run"])
        if value is not None:
            out[key] = value
    data_section = dict(tree.get("data") or {})
    for key, where in DATA_OWNED.items():
        if key != "tokenizer_dir" and not text_files:
            continue   # the data module's own arguments say where its data is
        value = _get(litgpt, where)
        if value is None:
            raise SourceError([f"{line_of(litgpt_path, where[:-1])}: {'.'.join(where)} is not set; "
                               + ("TextFiles reads .txt folders" if key != "tokenizer_dir" else "litgpt needs a tokenizer")])
        data_section[key] = value
    data_section["kind"] = "text-files" if text_files else "data-module"
    data_section["make_default"] = False
    out["data"] = data_section
    out["model"] = {**(tree.get("model") or {}), "block_size": block_size(litgpt)}
    return out


def line_of(path: Path, keys: tuple) -> str:
    """`file:line:col` of the deepest of `keys` written in the litgpt YAML, else the file."""
    try:
        tree = load_yaml(path)
    except SourceError:
        return str(path)
    found = locate(tree, keys)
    return f"{path}:{found[0]}:{found[1]}" if found else str(path)


def yaml_path(loaded: LoadedConfig) -> Path:
    """The user's litgpt YAML, absolute; asked only of a run config that names one."""
    named = trainer_settings(loaded.config).litgpt_config
    if named is None:
        raise ValueError(f"{loaded.path}: trainer.litgpt_config is not set")
    return loaded.resolve(named)


def source_of(loaded: LoadedConfig, run_config_key: tuple) -> tuple[Path, tuple] | None:
    """Where in the user's litgpt YAML a run-config key (as the run config names it) is written:
    (file, keys) for keys the litgpt YAML owns, None otherwise."""
    if not trainer_settings(loaded.config).litgpt_config:
        return None
    path = yaml_path(loaded)
    if len(run_config_key) == 1 and run_config_key[0] in OWNED:
        return path, OWNED[run_config_key[0]]
    if run_config_key[:1] == ("data",) and run_config_key[1:] and run_config_key[1] in DATA_OWNED:
        return path, DATA_OWNED[run_config_key[1]]
    if run_config_key[:2] == ("trainer", "devices"):
        return path, ("devices",)
    if run_config_key[:1] == ("data",) and loaded.config.data.kind == "data-module":
        return path, ("data",)
    return None


def data_module(loaded: LoadedConfig) -> dict:
    """The data module litgpt will build (the user's YAML with trainer.extra merged)."""
    cfg = loaded.config
    return effective(read(yaml_path(loaded)), cfg.trainer.extra).get("data") or {}


def local_paths(loaded: LoadedConfig, module: dict) -> dict[str, Path]:
    """The data module's arguments that name a local file or folder (relative ones resolved against
    the project folder, where litgpt runs): {argument: path}. URLs (s3://...) are not local."""
    found = {}
    for name, value in (module.get("init_args") or {}).items():
        if isinstance(value, str) and value and "://" not in value and (loaded.resolve(Path(value))).exists():
            found[name] = loaded.resolve(Path(value))
    return found


# Fingerprinting a data module's files reads their names and sizes only (no bytes): bounded.
MAX_FINGERPRINT_FILES = 100_000


def data_module_hash(loaded: LoadedConfig) -> str:
    """sha256 over the data module's class and arguments and, for each local folder or file they name,
    every file's relative name and size: a changed dataset (added, removed or rewritten chunks) or a
    changed argument gives a new hash. Contents are not read: a same-size rewrite goes unseen."""
    module = data_module(loaded)
    digest = hashlib.sha256(json.dumps({"class_path": module.get("class_path"),
                                        "init_args": module.get("init_args") or {}}, sort_keys=True, default=str).encode())
    seen = 0
    for name, path in sorted(local_paths(loaded, module).items()):
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            seen += 1
            if seen > MAX_FINGERPRINT_FILES:
                break
            digest.update(f"{name}/{file.relative_to(path) if file != path else file.name}\0{file.stat().st_size}\0".encode())
    return "sha256:module:" + digest.hexdigest()


def write_values(path: Path, updates: dict) -> None:
    """Set the OWNED runbook keys in `updates` at their litgpt places, comments and order kept."""
    _write_places(path, {OWNED[key]: str(value) if isinstance(value, Path) else value for key, value in updates.items()})


def write_data_values(path: Path, updates: dict) -> None:
    """Set data folders (train_dir, val_dir: TextFiles' train/val_data_path) in the litgpt YAML, comments kept."""
    _write_places(path, {DATA_OWNED[key]: str(value) for key, value in updates.items()})


def _write_places(path: Path, values: dict[tuple, object]) -> None:
    write_yaml_places(Path(path), values)   # the user's file: only the changed values' characters change


def launch_config(loaded: LoadedConfig, resume_from: Path | None) -> dict:
    """The user's litgpt config (trainer.extra merged) with only what supervision needs set on top."""
    cfg = loaded.config
    base = effective(read(yaml_path(loaded)), cfg.trainer.extra)
    train = base.get("train") or {}
    own = {
        "out_dir": str(loaded.out_dir),
        "resume": str(resume_from) if resume_from else False,
        "seed": cfg.seed,
        "tokenizer_dir": str(loaded.data_path("tokenizer_dir")),
        "train": {
            "save_interval": cfg.save_interval, "global_batch_size": cfg.batch_size,
            "micro_batch_size": cfg.micro_batch_size, "max_tokens": cfg.max_tokens,
            "log_interval": 1,   # runbook follows progress line by line
            # An lr cut below min_lr would make the cosine climb back to min_lr: the floor follows the cut.
            "min_lr": min(train.get("min_lr", 4e-5), cfg.lr),
        },
        "optimizer": {"init_args": {"lr": cfg.lr}},
    }
    return deep_merge(base, own)


def detach(tree: dict, loaded: LoadedConfig, dest: Path) -> dict:
    """A scratch run (drill, replay --execute) of a run based on the user's litgpt YAML: the YAML is
    copied to `dest` with the run-config keys it owns moved out of `tree` into the copy (their litgpt
    places), the scratch out_dir (default: the run config's) and every local data path made absolute.
    A recovery in the scratch run then writes into the copy, never into the user's YAML. Returns
    `tree` pointed at the copy."""

    yaml = round_trip_yaml()
    source = yaml_path(loaded)
    copy = yaml.load(source.read_text(encoding="utf-8"))
    values = {key: tree.pop(key) for key in list(OWNED) if key in tree}
    values.setdefault("out_dir", str(RunConfig.model_fields["out_dir"].default))
    for key, value in values.items():
        _set(copy, OWNED[key], str(value) if isinstance(value, Path) else value)
    if loaded.config.data.kind == "text-files":
        for key in ("train_dir", "val_dir"):
            _set(copy, DATA_OWNED[key], str(loaded.data_path(key)))
    elif isinstance(copy.get("data"), dict) and isinstance(copy["data"].get("init_args"), dict):
        for name, path in local_paths(loaded, data_module(loaded)).items():
            if name in copy["data"]["init_args"]:
                copy["data"]["init_args"][name] = str(path)
    _set(copy, DATA_OWNED["tokenizer_dir"], str(loaded.data_path("tokenizer_dir")))
    buffer = io.StringIO()
    yaml.dump(copy, buffer)
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(dest, buffer.getvalue())
    trainer = tree.setdefault("trainer", {})
    trainer["litgpt_config"] = str(dest)
    return tree


def _set(tree: dict, keys: tuple, value: object) -> None:
    *parents, last = keys
    for parent in parents:
        if not isinstance(tree.get(parent), dict):
            tree[parent] = {}
        tree = tree[parent]
    tree[last] = value
