"""Checks on an incident record read back from disk: every field a reader formats or computes with.

Records are written by the engine, but a reader must survive a hand-edited, half-restored or
foreign file: a time of 1e308 (no date has it), NaN, a 400-digit step, `notes: 5`. `problem()`
names the first bad field in one sentence; callers skip that record (with file and reason) and
show the others. Fields nobody reads are not checked, and unknown fields are kept.
"""

from __future__ import annotations

import re

from engine.records.journal_lines import MAX_INT, MAX_TIME, number_within

ID_PATTERN = re.compile(r"^incident-([0-9]{1,15})$")   # 15 digits: far past any project, short enough for a file name

_COUNTS = ("step_at_failure", "resumed_step", "tokens_at_failure", "steps_lost", "tokens_lost", "trainer_exit_code",
           "attempt")
_SECONDS = ("recovery_seconds", "runbook_seconds", "detection_seconds")
_TIMES = ("opened_at", "closed_at", "detected_at")
_TEXTS = ("playbook", "outcome", "decision", "decision_reason", "symptom", "severity", "opened_at_iso",
          "playbook_source", "playbook_hash", "resumed_from", "escalation_reason", "lesson")
_LISTS_OF_TEXT = ("notes", "log_excerpt")
_OBJECTS = ("config_before", "config_after", "snapshot")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def problem(record: object) -> str | None:
    """None for a usable record, else why it is not (one clause, no file name)."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    if not isinstance(record.get("id"), str) or not ID_PATTERN.match(record["id"]):
        return f"'id' is {_show(record.get('id'))}, not incident-N"
    for key in _COUNTS:
        value = record.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_INT):
            return f"'{key}' is {_show(value)}, not a whole number of sane size"
    for key in _SECONDS:
        value = record.get(key)
        if value is not None and not number_within(value, 0, MAX_TIME):
            return f"'{key}' is {_show(value)}, not a number of seconds"
    for key in _TIMES:
        value = record.get(key)
        if value is not None and not number_within(value, 0, MAX_TIME):
            return f"'{key}' is {_show(value)}, not a time"
    for key in _TEXTS:
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            return f"'{key}' is {_show(value)}, not text"
    for key in _LISTS_OF_TEXT:
        value = record.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"'{key}' is {_show(value)}, not a list of text"
    for key in _OBJECTS:
        value = record.get(key)
        if value is not None and not isinstance(value, dict):
            return f"'{key}' is {_show(value)}, not an object"
    actions = record.get("actions")
    if actions is not None:
        if not isinstance(actions, list) or not all(isinstance(a, dict) for a in actions):
            return f"'actions' is {_show(actions)}, not a list of objects"
        for a in actions:
            index, seconds = a.get("index"), a.get("seconds")
            if index is not None and not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index <= MAX_INT):
                return f"an action's 'index' is {_show(index)}, not an action number"
            if seconds is not None and not number_within(seconds, -MAX_TIME, MAX_TIME):
                return f"an action's 'seconds' is {_show(seconds)}, not a number"
    changes = record.get("config_changes")
    if changes is not None and not (isinstance(changes, dict)
                                    and all(isinstance(v, list) and len(v) == 2 for v in changes.values())):
        return f"'config_changes' is {_show(changes)}, not a map of key -> [before, after]"
    return None
