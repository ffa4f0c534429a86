"""Fuzz the record readers: whatever a journal line or an incident record holds, no traceback.

A journal line is accepted (then rebuild() and the status code paths use it) or skipped with a
reason; the real lines around it are always read. An incident record is valid (then every formatter
that shows it runs) or refused with a reason. HYPOTHESIS_PROFILE=long for a deeper run; the counts
per family are printed at the end (`-s`) for docs/reliability.md.
"""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from engine.records.incident_checks import problem
from engine.records.journal import Journal, rebuild
from engine.records.journal_lines import BadLine, decode, encode
from runbook.commands import incidents_cmd
from runbook.commands.report_cmd import incident_table

TRIED: Counter = Counter()
T = 1_790_000_000.0
KINDS = ["transition", "launch", "incident_opened", "action_done", "incident_closed", "trainer_exited", "env",
         "verified", "something_new"]
JOURNAL_KEYS = ["to", "from", "reason", "launch", "pid", "log", "started", "resume_from", "incident", "playbook",
                "decision", "index", "outcome", "exit_code", "signal", "vars", "time", "kind"]
RECORD_KEYS = ["id", "opened_at", "closed_at", "notes", "recovery_seconds", "config_changes", "config_before",
               "config_after", "step_at_failure", "resumed_step", "steps_lost", "tokens_lost", "actions",
               "log_excerpt", "playbook", "outcome", "decision_reason", "opened_at_iso", "attempt"]

scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-10**400, max_value=10**400)
           | st.floats() | st.text(max_size=20) | st.sampled_from(["running", "completed", "incident-1", "preemption"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                      max_leaves=12)


def real_lines() -> list[bytes]:
    return [encode({"time": T, "kind": "transition", "from": "starting", "to": "running", "reason": "launch 1"}),
            encode({"time": T, "kind": "launch", "launch": 1, "pid": 4242, "log": "/x/trainer-001.log"}),
            encode({"time": T, "kind": "incident_opened", "incident": "incident-1", "playbook": "preemption",
                    "decision": "recover"}),
            encode({"time": T, "kind": "incident_closed", "incident": "incident-1", "outcome": "recovered"}),
            encode({"time": T, "kind": "transition", "from": "running", "to": "completed", "reason": "done"})]


def read_with(tmp_path, middle: bytes) -> None:
    """The fuzzed line between real ones: the real ones are all read, rebuild() and status fields work."""
    lines = real_lines()
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(lines[:2]) + middle + b"\n" + b"".join(lines[2:]))
    journal = Journal(path)
    entries = journal.entries()
    state = rebuild(entries)
    assert state.run_state.value == "completed" and len(state.history.fired["preemption"]) == 1
    assert len(entries) >= len(lines)
    for e in entries:   # what status reads from each transition
        if e["kind"] == "transition":
            float(e["time"]) - 1.0


@pytest.fixture(scope="module", autouse=True)
def _print_counts():
    yield
    print("\ninputs tried per family (0 tracebacks):", dict(TRIED))


@given(value=values)
def test_any_json_value_as_a_journal_line(tmp_path_factory, value):
    TRIED["journal: random JSON value"] += 1
    read_with(tmp_path_factory.mktemp("j"), json.dumps(value).encode())


@given(kind=st.sampled_from(KINDS), fields=st.dictionaries(st.sampled_from(JOURNAL_KEYS), values, max_size=6),
       checksummed=st.booleans())
def test_any_fields_in_a_journal_entry(tmp_path_factory, kind, fields, checksummed):
    TRIED["journal: entry with random fields"] += 1
    entry = {"time": T, "kind": kind, **fields}
    raw = encode(entry).rstrip(b"\n") if checksummed else json.dumps(entry, default=str).encode()
    try:
        decode(raw)
    except BadLine:
        pass
    read_with(tmp_path_factory.mktemp("j"), raw)


@given(data=st.binary(max_size=200))
def test_any_bytes_as_a_journal_line(tmp_path_factory, data):
    TRIED["journal: random bytes"] += 1
    read_with(tmp_path_factory.mktemp("j"), data.replace(b"\n", b" "))


def test_a_real_line_torn_at_every_byte_offset(tmp_path):
    for line in real_lines():
        body = line.rstrip(b"\n")
        for cut in range(len(body)):
            TRIED["journal: real line torn at each byte"] += 1
            read_with(tmp_path, body[:cut])
            if cut:
                with pytest.raises(BadLine):
                    decode(body[:cut])   # a torn checksummed line is never taken for a whole one


@given(fields=st.dictionaries(st.sampled_from(RECORD_KEYS), values, max_size=8), valid_id=st.booleans())
def test_any_incident_record_is_refused_or_shown(fields, valid_id):
    TRIED["incident record: random fields"] += 1
    record = {**({"id": "incident-3"} if valid_id else {}), **fields}
    if problem(record) is not None:
        return
    console = Console(file=io.StringIO(), width=120)
    incidents_cmd.out, saved = console, incidents_cmd.out
    try:
        incidents_cmd.print_table([record])
        incidents_cmd.print_record(record)
        json.dumps(incidents_cmd.row(record), allow_nan=False)
        incident_table([record])
    finally:
        incidents_cmd.out = saved


@given(value=values)
def test_any_json_value_as_an_incident_record(value):
    TRIED["incident record: random JSON value"] += 1
    assert problem(value) is not None or isinstance(value, dict)
