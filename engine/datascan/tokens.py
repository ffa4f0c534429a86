"""The tokenizer side of the data scan: loading it, counting a line's tokens, and bounding them.

Bounds let the scan skip most of the tokenizing. For a byte-level BPE tokenizer with no normalizer
every byte becomes one symbol before merging and merges only shrink the sequence, so a line of n
bytes has at most n tokens (`token_bounds` checks the tokenizer spec; any other tokenizer is
tokenized in full). Pure functions of the tokenizer and a count; no file is read here but
tokenizer.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engine.core.tokenizer_file import TokenizerUnloadable, load_tokenizer_file
from engine.datascan.report import DataScanError

DEFAULT_MAX_TOKENS = 100_000
# Pre-tokenizers that only split the text (never add characters) when combined with ByteLevel.
_SPLITTERS = frozenset({"Split", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit", "CharDelimiterSplit"})
_LOSSLESS = frozenset({"ByteLevel", "Split", "Digits", "Punctuation"})  # keep every byte (Split unless "Removed")


class Encoded(Protocol):
    @property
    def ids(self) -> Sized: ...   # one item per token


class LineTokenizer(Protocol):
    """What the scan asks of a tokenizer: a `tokenizers.Tokenizer`, ByteCounter, or anything that encodes alike."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> Encoded: ...
    def encode_batch(self, texts: list[str], add_special_tokens: bool = ...) -> Sequence[Encoded]: ...


def _spec_text(tokenizer: LineTokenizer) -> str:
    """A Hugging Face tokenizer's JSON spec; AttributeError for any other kind (ByteCounter, another library)."""
    return getattr(tokenizer, "to_str")()


def load_tokenizer(tokenizer_dir: Path) -> LineTokenizer:
    """The folder's tokenizer.json, or DataScanError in one sentence (the same as `runbook check`'s)."""
    path = Path(tokenizer_dir) / "tokenizer.json"
    if not os.path.lexists(path):
        raise DataScanError(f"no tokenizer.json in {tokenizer_dir}")
    try:
        return load_tokenizer_file(path)
    except FileNotFoundError:   # a dangling symlink
        raise DataScanError(f"no tokenizer.json in {tokenizer_dir} ({path} is a link to nothing)") from None
    except TokenizerUnloadable as error:
        raise DataScanError(str(error)) from None


class ByteCounter:
    """Counts a line's UTF-8 bytes as its tokens: for a run whose trainer tokenizes by itself (kind script,
    hf-trainer: byte-level, or its own tokenizer runbook cannot know), so the data scan still finds the
    undecodable, control-character and overlong lines instead of failing on a missing tokenizer.json."""

    class _Encoding:
        def __init__(self, n: int):
            self.ids = range(n)

    def encode(self, text: str, add_special_tokens: bool = False) -> "ByteCounter._Encoding":
        return self._Encoding(len(text.encode("utf-8", "surrogatepass")))

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list["ByteCounter._Encoding"]:
        return [self.encode(t) for t in texts]


def counting_tokenizer(tokenizer: LineTokenizer) -> LineTokenizer:
    """Truncation would hide long lines and padding would inflate counts: count on a copy without them."""
    if getattr(tokenizer, "truncation", None) is None and getattr(tokenizer, "padding", None) is None:
        return tokenizer
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(_spec_text(tokenizer))
    copy.no_truncation()
    copy.no_padding()
    return copy


@dataclass(frozen=True)
class TokenBounds:
    """bytes / longest <= tokens(line) <= bytes + slack for a line of `bytes` UTF-8 bytes."""

    slack: int
    longest: int | None  # bytes of the longest token; None when tokens may drop bytes (no lower bound)

    def lower(self, nbytes: int) -> int:
        return -(-nbytes // self.longest) if self.longest else 0


def token_bounds(tokenizer: LineTokenizer) -> TokenBounds | None:
    """Bounds on a line's token count from its byte length, or None when the spec doesn't show them.

    Upper: BPE over a ByteLevel pre-tokenizer with no normalizer. ByteLevel maps each byte to one
    symbol, the other allowed pre-tokenizers only split (or drop whitespace), BPE merges only shrink,
    and an added token replaces at least one byte; `add_prefix_space` adds one symbol. Special
    tokens are not added (the scan encodes with add_special_tokens=False). Lower: when nothing drops
    bytes or fuses unknowns, the tokens partition the bytes, so there are at least bytes / longest.
    """
    try:
        spec = json.loads(_spec_text(tokenizer))
    except Exception:  # not a HF tokenizers object (a test double, another library)
        return None
    model = spec.get("model") or {}
    if spec.get("normalizer") is not None or model.get("type") != "BPE" or not model.get("vocab"):
        return None
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    types = [s.get("type") for s in steps]
    if "ByteLevel" not in types or any(t not in _SPLITTERS | {"ByteLevel"} for t in types):
        return None
    slack = sum(1 for s in steps if s.get("type") == "ByteLevel" and s.get("add_prefix_space"))
    lossless = not model.get("fuse_unk") and all(
        s.get("type") in _LOSSLESS and str(s.get("behavior", "")).lower() != "removed" for s in steps)
    longest = max([len(t) for t in model["vocab"]] + [len(t["content"].encode()) for t in spec.get("added_tokens", [])])
    return TokenBounds(slack, longest if lossless else None)


def describe_bounds(bounds: TokenBounds | None) -> str:
    """The report's `token_bound` line."""
    return "none" if bounds is None else f"bytes/{bounds.longest or 'inf'} <= tokens <= bytes + {bounds.slack}"


def encode_batch(tokenizer: LineTokenizer, texts: list[str]) -> list[int | Exception]:
    """Token counts, or the exception for lines the tokenizer refuses (found by retrying one by one)."""
    fast = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
    try:
        return [len(e.ids) for e in fast(texts, add_special_tokens=False)]
    except Exception:
        return [encode_one(tokenizer, t) for t in texts]


def encode_one(tokenizer: LineTokenizer, text: str) -> int | Exception:
    try:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)
    except Exception as exc:
        return exc


def token_finding(n: int | Exception, max_tokens: int, context_length: int | None) -> tuple[str, str] | None:
    """The (kind, detail) a line's token count earns, if any: one finding at most, the worst."""
    if isinstance(n, Exception):
        return "encode_error", f"{type(n).__name__}: {str(n)[:200]}"
    if n > max_tokens:
        return "too_long", f"{n:,} tokens > limit {max_tokens:,}"
    if context_length is not None and n > context_length:
        return "over_context", f"{n:,} tokens > context {context_length:,}"
    return None
