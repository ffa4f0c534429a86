"""Loading a Hugging Face tokenizer.json in one sentence or not at all: `runbook check` (the trainer's
preflight) and `runbook scan-data` both load it, and both say the same thing when it cannot be loaded.

What a user's tokenizer.json can be: empty, garbage, 100,000-deep JSON (the Rust parser refuses it, no
stack overflow), a folder, a FIFO, or a symlink to a multi-GB file (`Tokenizer.from_file` would read
all of it: 3 GB took 45 s and 3 GB of memory before saying "expected value").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer

MAX_TOKENIZER_BYTES = 256 * 1024 * 1024   # the largest real ones (256k-token vocabularies) are ~35 MB


class TokenizerUnloadable(ValueError):
    """One sentence naming the file and why it does not load."""


def load_tokenizer_file(path: Path, limit: int = MAX_TOKENIZER_BYTES) -> Tokenizer:
    """`tokenizers.Tokenizer` from ``path``, or TokenizerUnloadable. FileNotFoundError passes through
    (callers word a missing tokenizer in their own terms)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as error:   # a symlink loop, a path the OS refuses
        raise TokenizerUnloadable(f"{path} cannot be read ({getattr(error, 'strerror', None) or error})") from None
    if not stat.S_ISREG(info.st_mode):
        raise TokenizerUnloadable(f"{path} is not a regular file (a folder, pipe or device)")
    if info.st_size > limit:
        raise TokenizerUnloadable(f"{path} does not load as a Hugging Face tokenizer ({info.st_size:,} bytes, more "
                                  f"than the {limit:,} a tokenizer.json may have)")
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # noqa: BLE001 - the Rust library raises its own exception type
        text = " ".join(str(error).split())[:200] or type(error).__name__
        raise TokenizerUnloadable(f"{path} does not load as a Hugging Face tokenizer ({text})") from None
