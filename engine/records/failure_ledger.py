"""The team's failure ledger: per failure class and per signature, what failures cost across runs.

PURE: one `LedgerEntry` per incident record (made by engine/records/failure_ledger_read.py, which reads the
run folders) in; rows, Markdown and JSON out. The table the seed manual keeps by hand:

- count, escalations (escalated or failed), the playbooks that handled it;
- detection: from the failure (the trainer's exit as its launcher recorded it; for a live trainer, its
  last progress line) to runbook's decision; recovery: from detection to training again;
- steps and tokens lost (recomputed work), and device-hours lost: devices x (recovery time + the time
  the lost tokens take to train again at the run's tokens/s), as GPU-hours on CUDA, else CPU-hours.
  An escalated incident's wait for a person is not known from the record and is not counted.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from statistics import mean
from typing import Callable, Sequence


@dataclass(frozen=True)
class LedgerEntry:
    run: str
    incident: str
    playbook: str
    outcome: str
    signature: str
    signature_text: str
    detection_s: float | None = None
    recovery_s: float | None = None
    steps_lost: int | None = None
    tokens_lost: int | None = None
    device_hours: float | None = None
    device_kind: str = "cpu"                # "gpu" | "cpu"
    tokens_skipped: int = 0                 # data a skip_data left out for good (not lost work: never trained)
    data_skipped: str | None = None         # that window in words: steps, positions, tokens, what the trainer left out


@dataclass
class LedgerRow:
    key: str                                # the playbook name, or the signature id
    label: str                              # the same, or the signature in words
    count: int = 0
    escalations: int = 0
    detection_mean_s: float | None = None
    detection_worst_s: float | None = None
    recovery_mean_s: float | None = None
    recovery_worst_s: float | None = None
    steps_lost: int = 0
    tokens_lost: int = 0
    tokens_skipped: int = 0
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    handled_by: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    incidents: list[str] = field(default_factory=list)
    data_skipped: list[str] = field(default_factory=list)   # "run:incident: the window in words"


def _stats(values: list[float]) -> tuple[float | None, float | None]:
    return (round(mean(values), 2), round(max(values), 2)) if values else (None, None)


def _row(key: str, label: str, entries: list[LedgerEntry]) -> LedgerRow:
    row = LedgerRow(key, label, count=len(entries))
    row.escalations = sum(e.outcome in ("escalated", "failed") for e in entries)
    row.detection_mean_s, row.detection_worst_s = _stats([e.detection_s for e in entries if e.detection_s is not None])
    row.recovery_mean_s, row.recovery_worst_s = _stats(
        [e.recovery_s for e in entries if e.recovery_s is not None and e.outcome == "recovered"])
    row.steps_lost = sum(e.steps_lost or 0 for e in entries)
    row.tokens_lost = sum(e.tokens_lost or 0 for e in entries)
    row.tokens_skipped = sum(e.tokens_skipped for e in entries)
    row.gpu_hours = round(sum(e.device_hours or 0 for e in entries if e.device_kind == "gpu"), 4)
    row.cpu_hours = round(sum(e.device_hours or 0 for e in entries if e.device_kind != "gpu"), 4)
    row.handled_by = sorted({e.playbook for e in entries if e.outcome == "recovered"})
    row.runs = sorted({e.run for e in entries})
    row.incidents = [f"{e.run}:{e.incident}" for e in entries]
    row.data_skipped = [f"{e.run}:{e.incident}: {e.data_skipped}" for e in entries if e.data_skipped]
    return row


def build_ledger(entries: list[LedgerEntry]) -> dict[str, list[LedgerRow]]:
    """{"by_class": [...], "by_signature": [...]}, most frequent first (then the costliest)."""
    def grouped(key: Callable[[LedgerEntry], str]) -> dict[str, list[LedgerEntry]]:
        out: dict[str, list[LedgerEntry]] = {}
        for entry in entries:
            out.setdefault(key(entry), []).append(entry)
        return out

    order = (lambda r: (-r.count, -r.steps_lost, r.key))
    by_class = [_row(name, name, group) for name, group in grouped(lambda e: e.playbook).items()]
    by_signature = [_row(sig, group[0].signature_text, group) for sig, group in grouped(lambda e: e.signature).items()]
    return {"by_class": sorted(by_class, key=order), "by_signature": sorted(by_signature, key=order)}


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(ledger: dict[str, list[LedgerRow]], runs: list[str], problems: Sequence[str] = ()) -> str:
    total = sum(r.count for r in ledger["by_class"])
    lines = ["# Failure ledger", "",
             f"{total} incident(s) in {len(runs)} run folder(s): {', '.join(_cell(r) for r in runs) or 'none'}.",
             "Detection: failure -> decision; recovery: detection -> training again (recovered incidents); "
             "hours: devices x (recovery + retraining the lost tokens); tokens skipped: data a divergence's skip "
             "left out for good. – : not known from the records.", ""]
    head = ("| {first} | count | escalated | detection mean / worst s | recovery mean / worst s | steps lost | "
            "tokens lost | tokens skipped | GPU-h | CPU-h | handled by |")
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for title, rows, first in (("By failure class", ledger["by_class"], "class (playbook)"),
                               ("By signature", ledger["by_signature"], "signature")):
        lines += [f"## {title}", "", head.format(first=first), rule]
        for r in rows:
            label = _cell(r.label).replace("`", "'")
            name = label if r.key == r.label else f"`{r.key}`: `{label}`"   # code: <n>, <path> are not HTML
            lines.append(f"| {name} | {r.count} | {r.escalations} | {_s(r.detection_mean_s)} / {_s(r.detection_worst_s)} | "
                         f"{_s(r.recovery_mean_s)} / {_s(r.recovery_worst_s)} | {r.steps_lost:,} | {r.tokens_lost:,} | {r.tokens_skipped:,} | "
                         f"{r.gpu_hours:.3f} | {r.cpu_hours:.3f} | {', '.join(r.handled_by) or 'nobody (escalated)'} |")
        lines.append("")
    skipped = [text for r in ledger["by_class"] for text in r.data_skipped]
    if skipped:
        lines += ["## Data skipped", ""] + [f"- {_cell(text)}" for text in skipped] + [""]
    if problems:
        lines += ["## Records left out", ""] + [f"- {_cell(p)}" for p in problems] + [""]
    return "\n".join(lines)


def to_json(ledger: dict[str, list[LedgerRow]], runs: list[str], problems: Sequence[str] = ()) -> str:
    return json.dumps({"runs": runs, "by_class": [asdict(r) for r in ledger["by_class"]],
                       "by_signature": [asdict(r) for r in ledger["by_signature"]], "left_out": list(problems)},
                      indent=2) + "\n"


__all__ = ["LedgerEntry", "LedgerRow", "build_ledger", "to_json", "to_markdown"]
