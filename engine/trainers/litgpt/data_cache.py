"""The tokenized-data cache litgpt's TextFiles reads, kept under the run folder.

Keyed by everything that shapes its bytes (the text, the tokenizer's files, the block size, the data
module and its arguments), so a changed tokenizer or block size never reuses a stale cache. It is
built in a staging folder beside it and renamed into place only when complete: litgpt trusts any
existing folder ("doesn't contain any index.json file" after a killed preprocessing).

Layout: <run_dir>/data/<key>/{train,val}/ hold links to the user's .txt files; TextFiles writes its
litdata chunks into <key>/train/train and <key>/val/val (its own naming).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from engine.core.crash_points import crash_point

TEXT_FILES = "litgpt.data.TextFiles"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "generation_config.json")
# Arguments that do not change the cache's bytes: where the text lies (its hash covers it) and how
# many loader processes read it.
NOT_SHAPING = frozenset({"train_data_path", "val_data_path", "num_workers"})
STAGING_SUFFIX = ".staging"


def tokenizer_hash(tokenizer_dir: Path) -> str:
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        path = Path(tokenizer_dir) / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_key(data_hash: str, tok_hash: str, block_size: int, data_module: dict) -> str:
    """PURE. 16 hex digits naming the cache for these inputs."""
    args = {k: v for k, v in (data_module.get("init_args") or {}).items() if k not in NOT_SHAPING}
    shape = {"text": data_hash, "tokenizer": tok_hash, "block_size": int(block_size),
             "module": data_module.get("class_path"), "args": args}
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cache_dir(run_dir: Path, key: str) -> Path:
    return Path(run_dir) / "data" / key


def loader_input_dir(folder: Path) -> Path:
    """The folder litdata's train loader reads (and records in the checkpoint's loader state)."""
    return Path(folder) / "train" / "train"


def is_complete(folder: Path) -> bool:
    return all((Path(folder) / split / split / "index.json").is_file() for split in ("train", "val"))


def staging_dir(folder: Path) -> Path:
    return Path(folder).with_name(Path(folder).name + STAGING_SUFFIX)


def link_texts(train_src: Path, val_src: Path, folder: Path) -> None:
    """Link the user's .txt files into folder/train and folder/val (the user's folders stay clean)."""
    for name, source in (("train", train_src), ("val", val_src)):
        target = Path(folder) / name
        target.mkdir(parents=True, exist_ok=True)
        for txt in sorted(Path(source).glob("*.txt")):
            link = target / txt.name
            if not link.is_symlink():
                link.symlink_to(txt.resolve())


def build(folder: Path, train_src: Path, val_src: Path, preprocess: Callable[[Path], None]) -> bool:
    """Make `folder` complete: preprocess(staging) builds into a fresh staging folder, which is renamed
    onto `folder` only when complete. Returns False when the cache was already there."""
    folder = Path(folder)
    if is_complete(folder):
        return False
    staging = staging_dir(folder)
    shutil.rmtree(staging, ignore_errors=True)   # a killed earlier attempt's, never trusted
    if folder.exists():                          # an incomplete cache from before staging existed
        shutil.rmtree(folder)
    link_texts(train_src, val_src, staging)
    preprocess(staging)
    if not is_complete(staging):
        raise RuntimeError(f"preprocessing ended without index.json in {staging}/train/train and val/val")
    crash_point("data-cache-staged")   # the tests: killed with a whole cache still in staging
    staging.rename(folder)
    return True


def link_complete_caches(source_run_dir: Path, target_run_dir: Path) -> list[Path]:
    """Give another run folder (a drill's or a replay's scratch run) each complete cache of this one, as
    hard links: it reads the same tokenized bytes instead of tokenizing the whole dataset again, at no
    extra space. Not a symlink: litdata resolves its input folder, and a resumed loader's recorded folder
    must be the scratch run's own. Another filesystem gets a copy. Built in staging, renamed when whole."""
    source = Path(source_run_dir) / "data"
    if not source.is_dir():
        return []
    linked = []
    for folder in sorted(source.iterdir()):
        target = Path(target_run_dir) / "data" / folder.name
        if folder.name.endswith(STAGING_SUFFIX) or not is_complete(folder) or target.exists() or target.is_symlink():
            continue
        staging = staging_dir(target)
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(folder, staging, symlinks=True, copy_function=_link_or_copy)
        staging.rename(target)
        linked.append(target)
    return linked


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:   # another filesystem, or links refused
        shutil.copy2(source, target)


def place(config: dict, run_dir: Path, data_hash: str, tokenizer_dir: Path, block_size: int) -> Path | None:
    """Point a TextFiles litgpt config at its cache folder (set in config['data'] in place) and return
    the folder; None for any other data module, which manages its own data."""
    data = config.get("data") or {}
    if data.get("class_path") != TEXT_FILES:
        return None
    folder = cache_dir(run_dir, cache_key(data_hash, tokenizer_hash(tokenizer_dir), block_size, data))
    data.setdefault("init_args", {}).update(train_data_path=str(folder / "train"), val_data_path=str(folder / "val"))
    return folder


def preprocess_argv(python: str, folder: Path, train_src: Path, val_src: Path, tokenizer_dir: Path,
                    block_size: int) -> list[str]:
    """PURE. The command that builds `folder` and then runs what follows `--` (preprocess.py)."""
    return [python, "-m", "engine.trainers.litgpt.preprocess", "--cache", str(folder), "--train", str(train_src),
            "--val", str(val_src), "--tokenizer", str(tokenizer_dir), "--block-size", str(block_size), "--"]
