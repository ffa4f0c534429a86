"""The trainer's first act: build the TextFiles cache (data_cache.build), then become `litgpt pretrain`.

    python -m engine.trainers.litgpt.preprocess --cache DIR --train DIR --val DIR --tokenizer DIR
        --block-size N -- litgpt pretrain --config FILE

Why in the trainer process and not the watcher: preprocessing takes as long as the data is big, the
watcher stays responsive, and a kill or crash of it is seen like any trainer failure (its output
goes to the launch's log). The process exec()s litgpt, so trainer.pid stays the trainer's pid.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from engine.trainers.litgpt import data_cache


def text_files_preprocess(tokenizer_dir: Path, block_size: int) -> Callable[[Path], None]:
    def preprocess(staging: Path) -> None:
        from litgpt.data import TextFiles
        from litgpt.tokenizer import Tokenizer

        data = TextFiles(train_data_path=staging / "train", val_data_path=staging / "val")
        # Exactly what litgpt pretrain's get_dataloaders passes (it adds the next token itself).
        data.connect(tokenizer=Tokenizer(tokenizer_dir), batch_size=1, max_seq_length=block_size)
        data.prepare_data()

    return preprocess


def main(argv: list[str]) -> int:
    own, _, command = _split(argv)
    parser = argparse.ArgumentParser(prog="engine.trainers.litgpt.preprocess")
    for name in ("--cache", "--train", "--val", "--tokenizer"):
        parser.add_argument(name, type=Path, required=True)
    parser.add_argument("--block-size", type=int, required=True)
    args = parser.parse_args(own)
    built = data_cache.build(args.cache, args.train, args.val, text_files_preprocess(args.tokenizer, args.block_size))
    print(f"runbook: data cache {'built' if built else 'reused'}: {args.cache}", flush=True)
    if not command:
        return 0
    executable = shutil.which(command[0]) or command[0]
    os.execv(executable, command)
    return 0  # not reached


def _split(argv: list[str]) -> tuple[list[str], str, list[str]]:
    if "--" not in argv:
        return argv, "", []
    i = argv.index("--")
    return argv[:i], "--", argv[i + 1:]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
