"""A failure's signature: what makes two failures "the same", computed from one recorded observation.

PURE: a snapshot (or a record's JSON) in, a `Signature` out; no files, no clocks. The parts:

- how the trainer ended: `exit 1`, `signal SIGKILL`, `exit unknown`, or `alive` (a hang, a slowdown);
- the exception the log tail ends with (the last `Type: message` line after a traceback, else the last
  line that looks like one), its message with the parts that differ between two occurrences of one
  failure masked: hex addresses, ids and hashes, paths, numbers (`Errno N` is kept: it names the error);
- the trainer's phase: before its first progress line, while training, or still alive.

The id is a hash of those parts, so it is the same in every run, on every machine and in every
version that masks the same way. Two failures with one id are "the same failure"; the ledger, the
run log and `runbook playbooks draft` all group by it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Iterable

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, computed_field

from engine.core.exit_codes import SAVED_ON_NOTICE

MAX_MESSAGE = 160            # masked message kept in the signature (the rest rarely tells failures apart)
MAX_LOG_LINE = 300           # the raw log line shown to a person
MAX_LINE_SCANNED = 2000      # a longer line is cut before any regex sees it

_MASKS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<id>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    # absolute, home- or dot-relative paths; and relative ones whose last part names a file (a/b.bin)
    (re.compile(r"(?<![\w.~])(?:~|\.{1,2})?(?:/[^\s'\",:;()\[\]{}<>|]+)+/?|\b[\w.-]+(?:/[\w.-]+)*/[\w-]+\.\w+\b"), "<path>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"), "<id>"),
    (re.compile(r"(?<![\w.<])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"), "<n>"),
)
_KEEP = re.compile(r"\[?Errno \d+\]?")          # ENOSPC and ENOENT are different failures
_EXCEPTION = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?::\s?(.*))?$")
_TRACEBACK = "Traceback (most recent call last):"
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")     # torch.distributed prefixes each rank's lines
_EXCEPTION_WORDS = ("Error", "Exception", "Interrupt", "Exit", "Fault", "Failure", "Corrupted", "Abort")


class Signature(BaseModel):
    """The stable parts of a failure, and the raw line they were read from."""

    model_config = ConfigDict(extra="ignore", frozen=True)   # `text` comes back from JSON: it is computed
    id: str
    ending: str                      # "exit 1" | "signal SIGKILL" | "exit unknown" | "alive" | "alive, stopped"
    exception: str | None = None     # "ShardIndexCorrupted", "torch.OutOfMemoryError"
    message: str | None = None       # masked
    phase: str = "while training"    # "before the first step" | "while training" | "while alive"
    # The log line as printed (clipped), for people; not part of the id. `evidence` in records before, still read.
    log_line: str | None = Field(None, validation_alias=AliasChoices("log_line", "evidence"))

    @computed_field  # type: ignore[prop-decorator]  # mypy reads no decorator above @property; pydantic's documented form
    @property
    def text(self) -> str:
        """One readable line: `exit 1, ShardIndexCorrupted: shard <hex> ... , while training`."""
        what = f"{self.exception}: {self.message}" if self.exception and self.message else self.exception
        return ", ".join(p for p in (self.ending, what, self.phase) if p)


def mask(text: str) -> str:
    """The text with what differs between two occurrences of one failure replaced by <hex>, <id>, <path>, <n>."""
    text = text[:MAX_LINE_SCANNED].replace("\x00", "")
    kept: list[str] = []

    def keep(m: re.Match) -> str:
        kept.append(m.group(0))
        return f"\x00{chr(ord('a') + len(kept) - 1)}\x00"   # letters only: no mask below touches them

    text = _KEEP.sub(keep, text, count=26)
    for pattern, placeholder in _MASKS:
        text = pattern.sub(placeholder, text)
    text = re.sub(r"\x00([a-z])\x00", lambda m: kept[ord(m.group(1)) - ord("a")], text)
    return " ".join(text.split())


def _exception_line(line: str) -> tuple[str, str] | None:
    m = _EXCEPTION.match(line.rstrip()[:MAX_LINE_SCANNED])
    if not m:
        return None
    return m.group(1), (m.group(2) or "").strip()


def find_exception(tail: Iterable[str]) -> tuple[str, str, str] | None:
    """(type, message, raw line) of the exception the tail ends with, or None.

    After the last traceback header: the first unindented `Type: message` line (Python prints it
    last, but a trainer may print more after it). Without a traceback: the last line whose type
    reads like an exception (`...Error`, `...Exception`, ...), so `Epoch 1 | ...` or `Seed set to 3`
    are never taken for one."""
    lines = [_RANK_PREFIX.sub("", str(line)) for line in tail][-400:]
    start = max((i for i, line in enumerate(lines) if line.strip().endswith(_TRACEBACK)), default=None)
    if start is not None:
        for line in lines[start + 1:]:
            if line[:1].isspace() or not line.strip():
                continue
            if (found := _exception_line(line)) is not None:
                return found[0], found[1], line.strip()
    for line in reversed(lines):
        found = _exception_line(line)
        if found and any(word in found[0].rsplit(".", 1)[-1] for word in _EXCEPTION_WORDS):
            return found[0], found[1], line.strip()
    return None


def _ending(trainer: dict) -> str:
    return _process_ending(trainer) + _group_cause(trainer.get("ranks"))


def _process_ending(trainer: dict) -> str:
    if trainer.get("alive"):
        return "alive, stopped" if trainer.get("stopped") else "alive"
    if trainer.get("signal"):
        return f"signal {trainer['signal']}"
    code = trainer.get("exit_code")
    return f"exit {code}" if isinstance(code, int) and not isinstance(code, bool) else "exit unknown"


def _group_cause(ranks: object) -> str:
    """Several ranks or nodes: a lost node and a rank that died first are different failures, whatever
    rank 0's process shows (engine/process/nodes.py); empty for one process."""
    if not isinstance(ranks, dict):
        return ""
    if ranks.get("dead_nodes"):
        return ", a node lost"
    first = ranks.get("first_failed")
    if first in (None, 0):
        return ""
    ended = next((r for r in ranks.get("ranks") or [] if isinstance(r, dict) and r.get("rank") == first), {})
    noticed = ended.get("exit_code") == SAVED_ON_NOTICE or ranks.get("first_failed_signal") in ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")
    return "" if noticed else ", a rank died first"   # a notice's save or a stop request is no rank's death


def _phase(snapshot: dict) -> str:
    if (snapshot.get("trainer") or {}).get("alive"):
        return "while alive"
    step = (snapshot.get("metrics") or {}).get("step")
    return "before the first step" if step is None else "while training"


def signature_of(snapshot: Any) -> Signature:
    """The signature of a StateSnapshot (or its JSON)."""
    data = snapshot.model_dump(mode="json") if hasattr(snapshot, "model_dump") else dict(snapshot or {})
    trainer = v if isinstance(v := data.get("trainer"), dict) else {}
    tail = t if isinstance(t := data.get("tail"), list) else []
    found = find_exception(tail)
    exception = message = log_line = None
    if found:
        exception, raw_message, log_line = found[0], mask(found[1])[:MAX_MESSAGE] or None, found[2]
        message = raw_message
    ending, phase = _ending(trainer), _phase(data)
    if log_line is None:   # no exception: the last line is still what a person wants to see
        log_line = next((str(line).strip() for line in reversed(tail) if str(line).strip()), None)
    key = "\n".join([ending, exception or "", message or "", phase])
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return Signature(id=f"sig-{digest}", ending=ending, exception=exception, message=message, phase=phase,
                     log_line=log_line[:MAX_LOG_LINE] if log_line else None)


def signature_of_record(record: dict) -> Signature | None:
    """A record's stored signature; for a record written before signatures (schema 2 and older), the one
    its snapshot gives. None when it has neither."""
    stored = record.get("signature")
    if isinstance(stored, dict):
        try:
            return Signature.model_validate(stored)
        except ValueError:
            pass
    snapshot = record.get("snapshot")
    return signature_of(snapshot) if isinstance(snapshot, dict) else None


def first_with(signature_id: str, earlier: Iterable[dict]) -> str | None:
    """The id of the first of `earlier` records (oldest first) with this signature."""
    for record in earlier:
        found = signature_of_record(record)
        if found is not None and found.id == signature_id:
            return str(record.get("id"))
    return None


# Playbooks that stand for "no playbook knows this failure": their repeats are "the same unknown failure".
UNKNOWN_CLASSES = ("unknown-crash", "unclaimed-failure", "unknown-exit")


def repeat_phrase(playbook: str | None, same_as: str) -> str:
    unknown = "unknown " if playbook in UNKNOWN_CLASSES else ""
    return f"the same {unknown}failure as {same_as}"


def _words(text: str | None) -> set[str]:
    return set(re.findall(r"<\w+>|[A-Za-z_]{3,}", (text or "").lower()))


def similarity(a: Signature, b: Signature) -> tuple[float, list[str]]:
    """0..1 and the reasons: same ending 0.2, same exception type 0.4, message words (Jaccard) 0.3, same phase 0.1."""
    score, reasons = 0.0, []
    if a.ending == b.ending:
        score += 0.2
        reasons.append(f"same ending ({a.ending})")
    else:
        reasons.append(f"different ending ({a.ending} vs {b.ending})")
    if a.exception and a.exception == b.exception:
        score += 0.4
        reasons.append(f"same exception type ({a.exception})")
    elif a.exception or b.exception:
        reasons.append(f"different exception type ({a.exception or 'none'} vs {b.exception or 'none'})")
    wa, wb = _words(a.message), _words(b.message)
    if wa or wb:
        overlap = len(wa & wb) / len(wa | wb)
        score += 0.3 * overlap
        reasons.append(f"{overlap:.0%} of the message words shared")
    if a.phase == b.phase:
        score += 0.1
    return round(score, 3), reasons


__all__ = ["UNKNOWN_CLASSES", "Signature", "repeat_phrase", "find_exception", "first_with", "mask", "signature_of", "signature_of_record", "similarity"]
