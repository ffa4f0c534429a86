"""`litgpt pretrain --config X` with `resume: auto`, for the toy trainer (tests/toy_trainer/trainer.py).

    python benchmarks/toy_pretrain.py pretrain --config TOY_CONFIG.json

The chaos benchmark's naive loop on the toy (benchmarks/chaos_contenders.py, --trainer toy) runs this where
it runs litgpt: like litgpt's `resume: auto`, a config whose resume is "auto" resumes from the newest
checkpoint folder in out_dir (ckpt-NNNNNN) whatever it holds, or starts afresh when there is none. Then it
becomes the toy trainer (exec: the same pid, so the loop's pid file names the trainer). Standard library
only: nothing of runbook's is imported, as litgpt imports none.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

TRAINER = Path(__file__).resolve().parent.parent / "tests" / "toy_trainer" / "trainer.py"
CHECKPOINT = re.compile(r"^ckpt-\d{6}$")


def newest_checkpoint(out_dir: Path) -> Path | None:
    """The newest ckpt-NNNNNN folder's state file, checked for nothing (as `resume: auto` checks nothing)."""
    folders = sorted(p for p in out_dir.glob("ckpt-*") if CHECKPOINT.match(p.name)) if out_dir.is_dir() else []
    return folders[-1] / "state.json" if folders else None


def resolved_config(config: Path) -> Path:
    """config itself, or (resume "auto") a copy beside it naming the checkpoint to resume from."""
    tree = json.loads(config.read_text())
    if tree.get("resume") != "auto":
        return config
    newest = newest_checkpoint(Path(tree["out_dir"]))
    resolved = config.with_name(f"resolved-{config.name}")
    resolved.write_text(json.dumps({**tree, "resume": str(newest) if newest else None}, indent=1))
    return resolved


def main(argv: list[str]) -> None:
    if argv[:1] != ["pretrain"] or "--config" not in argv:
        raise SystemExit("usage: toy_pretrain.py pretrain --config TOY_CONFIG.json")
    config = resolved_config(Path(argv[argv.index("--config") + 1]))
    os.execv(sys.executable, [sys.executable, str(TRAINER), str(config)])


if __name__ == "__main__":
    main(sys.argv[1:])
