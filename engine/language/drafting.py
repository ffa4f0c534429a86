"""Draft a playbook from an escalated incident: match, limits, actions and tests, ready for a review.

PURE: the record, the other recorded incidents and today's playbooks in; a `Draft` (its YAML text and
what was chosen, and why) out. `runbook playbooks draft` writes it and checks it (lint, tests, replay).

- match: how the trainer ended (exit code / signal) and a `log` pattern made from the signature: the
  exception type and its message with each masked part (<n>, <hex>, <path>, <id>) a wildcard, so the
  next occurrence matches whatever its numbers and paths.
- actions: those of the closest known class (the playbook whose recovered incidents or own tests have
  the most similar signature, when similar enough), else the safe default: verify the checkpoints,
  resume once from the newest verified one; a second occurrence within a day escalates (limits).
- tests: the incident's recorded state must fire it; every other recorded incident (one per
  signature) must not, unless it has the same signature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from engine.language.playbook import ActionStep, Playbook
from engine.records.signature import UNKNOWN_CLASSES, Signature, signature_of, signature_of_record, similarity
from engine.language.playbook_testing import build_snapshots

CLOSE_ENOUGH = 0.75          # similarity at which a known class's actions are reused (same ending + type + most words)
DRAFT_PRIORITY = 10          # above unknown-exit (5) and unknown-crash (0), below every specific shipped class
TEST_TAIL_LINES = 12
MAX_TEST_LINE = 300
MAX_OTHER_TESTS = 25

_WILDCARDS = {"<n>": r"[-+]?[0-9][0-9.eE+-]*", "<hex>": r"0x[0-9a-fA-F]+", "<path>": r"\S+", "<id>": r"[0-9a-fA-F-]+"}
_META = re.compile(r"([\\.^$|?*+()\[\]{}])")


class NotDraftable(ValueError):
    """The incident needs no new playbook, or has nothing to draft one from (one sentence)."""


@dataclass
class Draft:
    name: str
    tree: dict                                  # the playbook as YAML data
    signature: Signature
    choice: str                                 # which actions, and why (one line)
    notes: list[str] = field(default_factory=list)


def why_not_draftable(record: dict) -> str | None:
    incident_id, outcome = record.get("id"), record.get("outcome")
    if outcome == "recovered":
        return (f"{incident_id} was recovered by '{record.get('playbook')}': a playbook already handles this failure, "
                "so there is nothing to draft")
    if outcome == "open":
        return f"{incident_id} is still open (its recovery has not ended); draft from it once it has escalated"
    if not isinstance(record.get("snapshot"), dict):
        return f"{incident_id} holds no recorded state to draft a playbook from"
    if (record["snapshot"].get("trainer") or {}).get("alive"):
        # Nothing but "alive" would tell it apart: such a draft would fire on every observation of a healthy run.
        return (f"{incident_id} happened while the trainer was alive (a hang or a slowdown, not a crash), so its state "
                f"has nothing a new rule could match on; tune the limits of '{record.get('playbook')}' instead")
    return None


def pattern_for(signature: Signature) -> str | None:
    """An RE2 pattern matching the signature's exception line, whatever its masked parts were."""
    if not signature.exception:
        return None
    out = [r"^\s*", _META.sub(r"\\\1", signature.exception)]
    if signature.message:
        out.append(":")
        for part in re.split(r"(<n>|<hex>|<path>|<id>|\s+)", " " + signature.message):
            if part in _WILDCARDS:
                out.append(_WILDCARDS[part])
            elif part and part.isspace():
                out.append(r"\s+")
            elif part:
                out.append(_META.sub(r"\\\1", part))
    return "".join(out)


def _exit_clause(signature: Signature) -> dict | None:
    ending = signature.ending
    if ending.startswith("signal "):
        return {"exit": {"signals": [ending.removeprefix("signal ")]}}
    if ending.startswith("exit ") and ending.removeprefix("exit ").lstrip("-").isdigit():
        return {"exit": {"codes": [int(ending.removeprefix("exit "))]}}
    if ending == "exit unknown":
        return {"exit": {"unknown": True}}
    return {"expr": "state.trainer.alive"}


def kebab(text: str) -> str:
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", text).replace("_", "-").replace(" ", "-").lower()
    return re.sub(r"[^a-z0-9-]+", "", re.sub(r"-+", "-", words)).strip("-")[:50] or "failure"


def draft_name(signature: Signature, taken: Iterable[str]) -> str:
    base = kebab(signature.exception.rsplit(".", 1)[-1]) if signature.exception else kebab(f"{signature.ending} {signature.phase}")
    taken, name, n = set(taken), base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def _action_yaml(step: ActionStep) -> dict:
    out: dict[str, object] = {step.verb: dict(step.params)}
    if step.condition is not None:
        out["if"] = step.condition
    if step.on_failure != "abort":
        out["on_failure"] = step.on_failure
    return out


def _fired_test_states(playbook: Playbook) -> list:
    """The snapshot (as the playbook test builds it) at which each of its own tests expects it to fire."""

    states = []
    for test in playbook.tests:
        if test.expect_fires_at and 0 < test.expect_fires_at <= len(test.observations):
            try:
                states.append(build_snapshots(test.observations[:test.expect_fires_at])[-1])
            except ValueError:
                continue
    return states


def closest_class(target: Signature, playbooks: list[Playbook], records: list[dict]) -> tuple[Playbook | None, float, str]:
    """The known class (not an unknown-* fallback) whose examples are most like `target`, its score and why."""
    best: tuple[Playbook | None, float, str] = (None, 0.0, "no known class has an example to compare with")
    recovered: dict[object, list[tuple[Signature, str]]] = {}   # by the record's playbook, as written
    for record in records:
        if record.get("outcome") == "recovered" and (sig := signature_of_record(record)) is not None:
            recovered.setdefault(record.get("playbook"), []).append((sig, str(record.get("id"))))
    for playbook in playbooks:
        if playbook.name in UNKNOWN_CLASSES:
            continue
        examples = [(signature_of(state), "its test state") for state in _fired_test_states(playbook)]
        examples += [(sig, rid) for sig, rid in recovered.get(playbook.name, [])]
        for sig, where in examples:
            score, reasons = similarity(target, sig)
            if score > best[1]:
                best = (playbook, score, f"'{playbook.name}' ({where}): similarity {score:.2f}: {'; '.join(reasons)}")
    return best


def _test_state(record: dict) -> dict:
    """A compact observation of a record's snapshot: how the trainer ended, the step, the last log lines."""
    snapshot = record["snapshot"]
    trainer = {k: v for k, v in (snapshot.get("trainer") or {}).items()
               if k in ("alive", "exit_code", "signal", "stopped") and v is not None and not (k == "stopped" and v is False)}
    tail = [str(line)[:MAX_TEST_LINE] for line in (snapshot.get("tail") or [])]
    lines = tail[-TEST_TAIL_LINES:]
    sig = signature_of_record(record)
    if sig and sig.log_line and not any(sig.log_line[:MAX_TEST_LINE] in line for line in lines):
        lines = [next((line for line in tail if sig.log_line[:MAX_TEST_LINE] in line), sig.log_line)] + lines
    state: dict = {"trainer": trainer, "tail": lines}
    step = (snapshot.get("metrics") or {}).get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        state["metrics"] = {"step": step}
    return state


def _test_config(record: dict) -> dict:
    before = v if isinstance(v := record.get("config_before"), dict) else {}
    return {k: before[k] for k in ("micro_batch_size", "batch_size", "lr") if k in before}


def draft_playbook(record: dict, others: list[dict], playbooks: list[Playbook]) -> Draft:
    """The draft for `record` (check why_not_draftable first); `others`: every other recorded incident
    (a record from another run folder may carry "run": its folder, to tell equal ids apart)."""
    if (reason := why_not_draftable(record)) is not None:
        raise NotDraftable(reason)
    incident_id = str(record["id"])
    signature = signature_of_record(record)
    assert signature is not None
    name = draft_name(signature, [p.name for p in playbooks])
    clauses = [c for c in (_exit_clause(signature),) if c]
    pattern = pattern_for(signature)
    if pattern:
        clauses.append({"log": {"pattern": pattern, "scope": "tail"}})
    notes = [] if pattern else [f"{incident_id} printed no exception line: the draft matches on how the trainer ended "
                                f"alone ({signature.ending}); narrow it before accepting it"]

    others = [r for r in others if r is not record]
    known, score, why = closest_class(signature, playbooks, others)
    if known is not None and score >= CLOSE_ENOUGH:
        actions = [_action_yaml(step) for step in known.actions]
        choice = f"actions of the closest known class {why}"
    else:
        actions = [
            {"verify_checkpoints": {}},
            {"resume": {"from": "newest_verified"}},
            {"record": {"note": f"{signature.id} ({name}) at step {{{{ state.metrics.step }}}}: verified the checkpoints "
                                f"and resumed once; a second occurrence within a day escalates"}},
        ]
        choice = (f"the safe default (verify, resume once, then escalate): no known class is close enough "
                  f"(needs {CLOSE_ENOUGH:.2f}; closest: {why})")
    step = (record.get("snapshot", {}).get("metrics") or {}).get("step")
    what = f"{signature.exception}: {signature.message}" if signature.message else (signature.exception or "no exception line")
    tree = {
        "name": name,
        "description": f"The trainer ended with {signature.ending} {signature.phase}, printing {what} "
                       f"(signature {signature.id}, drafted from {incident_id}).",
        "severity": "critical" if known is None or score < CLOSE_ENOUGH else known.severity,
        "priority": DRAFT_PRIORITY,
        "lesson": f"{signature.exception or signature.ending} first escalated as {incident_id}"
                  + (f" at step {step}" if isinstance(step, int) else "")
                  + "; it was drafted into a playbook and reviewed: "
                  + ("recover it as the closest known class does." if known is not None and score >= CLOSE_ENOUGH
                     else "resume once from the newest verified checkpoint, escalate if it comes back within a day."),
        "inhibits": ["unknown-crash"] if not signature.ending.startswith("alive") else [],
        "match": {"all": clauses} if len(clauses) > 1 else clauses[0],
        "limits": {"max_attempts": 1, "window": "24h"},
        "actions": actions,
        "tests": _tests(record, others, signature, name),
    }
    if not tree["inhibits"]:
        del tree["inhibits"]
    return Draft(name, tree, signature, choice, notes)


def _short(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tests(record: dict, others: list[dict], signature: Signature, name: str) -> list[dict]:
    tests = [{"name": f"fires on {record['id']} ({signature.id})", "observations": [_test_state(record)],
              "config": _test_config(record), "expect_fires_at": 1}]
    seen: set[tuple[str, object]] = set()
    for other in others:
        sig = signature_of_record(other)
        if other is record or sig is None or not isinstance(other.get("snapshot"), dict):
            continue
        key = (sig.id, other.get("playbook"))
        if key in seen or len(seen) >= MAX_OTHER_TESTS:
            continue
        seen.add(key)
        same = sig.id == signature.id
        where = f"{other['run']}:{other.get('id')}" if isinstance(other.get("run"), str) else other.get("id")
        tests.append({
            "name": (f"fires on {where} too: the same failure ({sig.id})" if same else
                     f"does not fire on {where} ({other.get('playbook')}: {_short(sig.text)})"),
            "observations": [_test_state(other)], "config": _test_config(other),
            "expect_fires_at": 1 if same else None,
        })
    for test in tests:
        if not test["config"]:
            del test["config"]
    return tests


__all__ = ["CLOSE_ENOUGH", "Draft", "NotDraftable", "closest_class", "draft_name", "draft_playbook", "pattern_for",
           "why_not_draftable"]
