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


# --- run-folder JSON records, outbox messages, tokenizer.json, COLUMNS (issue 26, round two, CLI side) -----
def nest(value, depth: int, as_object: bool):
    for _ in range(depth):
        value = {"a": value} if as_object else [value]
    return value


@given(value=values, depth=st.integers(min_value=0, max_value=400), as_object=st.booleans(),
       raw=st.none() | st.binary(max_size=200) | st.integers(min_value=1, max_value=200_000))
def test_any_run_folder_json_record_is_read_or_one_sentence(tmp_path_factory, value, depth, as_object, raw):
    """heartbeat.json, a manifest, an outbox message, a launcher's status: read_json_record returns a value
    nested at most 64 deep, or a SourceError naming the file; never RecursionError or another exception."""
    from engine.core.bounded_read import MAX_JSON_DEPTH, json_depth_over, read_json_record
    from engine.core.errors import SourceError

    path = tmp_path_factory.mktemp("r") / "record.json"
    if raw is None:
        TRIED["run-folder JSON: random value nested 0-400 deep"] += 1
        path.write_text(json.dumps(nest(value, depth, as_object)))
    elif isinstance(raw, int):
        TRIED["run-folder JSON: 1-200,000 open brackets"] += 1
        path.write_text(("{\"a\":" if as_object else "[") * raw)
    else:
        TRIED["run-folder JSON: random bytes"] += 1
        path.write_bytes(raw)
    try:
        read = read_json_record(path)
    except SourceError as error:
        assert str(path) in str(error) and "\n" not in str(error)
    else:
        assert not json_depth_over(read, MAX_JSON_DEPTH)


MESSAGE_KEYS = ["kind", "incident_id", "text", "blocks", "broadcast", "queued_at"]
message_values = values | st.sampled_from(["open", "update", "close", "digest", "incident-1", "text"]) | st.lists(
    st.dictionaries(st.text(max_size=5), values, max_size=3), max_size=3)


@given(messages=st.lists(st.dictionaries(st.sampled_from(MESSAGE_KEYS), message_values, max_size=6) | values,
                         min_size=1, max_size=5))
def test_any_outbox_message_is_delivered_or_set_aside(tmp_path_factory, messages):
    """The sender's queue: a message it cannot use (the `{}` that held every notice behind it) is moved to
    failed/ with its reason; every message handed to the sender has the fields it reads."""
    from runbook.outbox import Outbox
    from runbook.slack import message_problem

    TRIED["outbox: random messages (a queue of 1-5)"] += len(messages)
    folder = tmp_path_factory.mktemp("o")
    box = Outbox(folder, check=message_problem)
    for message in messages:
        box.put(message)
    pending = box.pending()
    for _, message in pending:
        assert message_problem(message) is None
        {"text": message["text"], "blocks": message.get("blocks"), "key": "thread:" + message["incident_id"]}
    parked = sorted(p.name for p in (folder / "failed").glob("*.json")) if (folder / "failed").is_dir() else []
    assert len(pending) + len(parked) == len(messages)
    assert all((folder / "failed" / name.replace(".json", ".reason.txt")).is_file() for name in parked)


@given(data=st.binary(max_size=300) | st.builds(lambda n: b"[" * n, st.integers(min_value=0, max_value=100_000)))
def test_any_tokenizer_json_loads_or_is_one_sentence(tmp_path_factory, data):
    from engine.core.tokenizer_file import TokenizerUnloadable, load_tokenizer_file

    TRIED["tokenizer.json: random bytes or brackets"] += 1
    path = tmp_path_factory.mktemp("t") / "tokenizer.json"
    path.write_bytes(data)
    try:
        load_tokenizer_file(path)
    except TokenizerUnloadable as error:
        assert str(path) in str(error) and "\n" not in str(error)


@given(value=st.none() | st.text(max_size=12) | st.integers(min_value=0, max_value=10**12).map(str),
       terminal=st.none() | st.integers(min_value=0, max_value=10**6))
def test_any_columns_value_gives_a_sane_width(value, terminal):
    from runbook.terminal import MAX_COLUMNS, MIN_COLUMNS, clamped_columns

    TRIED["COLUMNS: random text"] += 1
    fixed = clamped_columns(value, terminal)
    assert fixed is None or MIN_COLUMNS <= int(fixed) <= MAX_COLUMNS
