"""The embedded default: a corpus and a BPE tokenizer made on this machine, nothing downloaded.

The corpus is this Python's own standard library source, so every machine that can run runbook can
make it. Files are chosen and ordered deterministically so two machines make the same data (same
`data_hash`) from the same Python version.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

from engine.core.durable import atomic_write_text

SPECIAL_TOKENS = ("<s>", "</s>", "<unk>")


def stdlib_sources(limit_bytes: int) -> list[Path]:
    """Deterministic list of stdlib .py files adding up to about `limit_bytes`."""
    root = Path(sysconfig.get_paths()["stdlib"])
    picked, total = [], 0
    for path in sorted(root.glob("*.py")):
        size = path.stat().st_size
        if size == 0 or size > 200_000:
            continue
        picked.append(path)
        total += size
        if total >= limit_bytes:
            break
    return picked


def _write_shards(files: list[Path], folder: Path, shards: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    texts: list[list[str]] = [[] for _ in range(shards)]
    for i, path in enumerate(files):
        texts[i % shards].append(path.read_text(encoding="utf-8", errors="replace"))
    for i, parts in enumerate(texts):
        atomic_write_text(folder / f"shard-{i:03d}.txt", "\n\n".join(parts))


def make_corpus(data_dir: Path, train_bytes: int = 1_500_000, val_bytes: int = 120_000) -> None:
    """Write `train/` and `val/` text shards under `data_dir` unless they already exist."""
    train_dir, val_dir = data_dir / "train", data_dir / "val"
    if any(train_dir.glob("*.txt")) and any(val_dir.glob("*.txt")):
        return
    files = stdlib_sources(train_bytes + val_bytes)
    val_files: list[Path] = []
    train_files: list[Path] = []
    val_total = 0
    for path in files:  # every 12th file goes to validation until it has enough text
        if len(val_files) * 12 <= len(train_files) and val_total < val_bytes:
            val_files.append(path)
            val_total += path.stat().st_size
        else:
            train_files.append(path)
    _write_shards(train_files, train_dir, shards=4)
    _write_shards(val_files, val_dir, shards=1)


def make_tokenizer(corpus_dir: Path, tokenizer_dir: Path, vocab_size: int = 512) -> None:
    """Train a byte-level BPE tokenizer on the corpus and save it in the layout litgpt reads."""
    if (tokenizer_dir / "tokenizer.json").is_file():
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(p) for p in sorted(corpus_dir.glob("*/*.txt"))], trainer)
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(tokenizer_dir / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "tokenizer_class": "PreTrainedTokenizerFast"}
    atomic_write_text(tokenizer_dir / "tokenizer_config.json", json.dumps(config, indent=2))


def ensure_default_assets(data_dir: Path, tokenizer_dir: Path) -> None:
    make_corpus(data_dir)
    make_tokenizer(data_dir, tokenizer_dir)
