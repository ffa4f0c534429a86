"""Fuzz the record readers: whatever a journal line or an incident record holds, no traceback.

A journal line is accepted (then rebuild() and the status code paths use it) or skipped with a
reason; the real lines around it are always read. An incident record is generated from the reader's own
schema, valid in at least half the cases, and then read back by the store and shown by every formatter
that shows one (`incidents` table, `incidents show`, `incidents --json`, the report's incident table,
the run-log entry, the Slack opened and closed notices, `replay`): each names the incident and stays
bounded. The other cases are a valid record broken in one named way, and problem() (or the store's typed
check) must name that field. The test counts valid and broken cases and the runs of each formatter,
asserts them, and prints them with the seed (RUNBOOK_FUZZ_SEED=<seed> makes the same cases again).
HYPOTHESIS_PROFILE=long for a deeper run; every count is printed in the run's final summary (tests/conftest.py)
for docs/reliability.md.
"""

from __future__ import annotations

import functools
import io
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from engine.records.incident_checks import (_COUNTS, _LISTS_OF_TEXT, _OBJECTS, _SECONDS, _TEXTS, _TIMES, ID_PATTERN,
                                            problem)
from engine.records.incident_store import BadIncidentRecord, IncidentStore
from engine.records.journal import Journal, rebuild
from engine.records.journal_lines import MAX_INT, MAX_TIME, BadLine, decode, encode
from engine.records.run_log import render_entry
from runbook.commands import incidents_cmd
from runbook.commands.report_cmd import incident_table
from tests.conftest import REPO, hypothesis_profile, hypothesis_seed, record_evidence, seeded

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
    replayed = rebuild(entries)
    assert replayed.phase.value == "completed" and len(replayed.history.fired["preemption"]) == 1
    assert len(entries) >= len(lines)
    for e in entries:   # what status reads from each transition
        if e["kind"] == "transition":
            float(e["time"]) - 1.0


@pytest.fixture(scope="module", autouse=True)
def _print_counts():
    yield
    record_evidence(f"record fuzz, inputs tried per family ({hypothesis_profile()}; 0 tracebacks): {dict(TRIED)}")


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


# --- incident records: valid ones through every formatter, broken ones named (issue 27 item 6) ----------
# A record is built from the reader's own schema (engine/records/incident_checks.py for the checked
# fields, engine/records/incident.py for the types the store then validates). Each example is one valid
# record, which goes through every formatter that shows a record, and one copy of it broken in one named
# way, which the reader must refuse naming that field: half the cases are valid by construction (no
# draw can starve the formatters), and the test asserts it from its own counts.
KEBAB = st.from_regex(r"[a-z][a-z0-9]{0,10}(-[a-z0-9]{1,8}){0,3}", fullmatch=True)
TEXT = st.text(max_size=40)
COUNT = st.integers(min_value=-MAX_INT, max_value=MAX_INT)
SECONDS = st.floats(min_value=0, max_value=MAX_TIME) | st.integers(min_value=0, max_value=int(MAX_TIME))
JSON_LEAF = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False) | TEXT
JSON_TREE = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                         max_leaves=8)
SIGNALS = st.sampled_from([None, "SIGTERM", "SIGKILL", "SIGSEGV", "SIGABRT"])


def _snapshot(alive, exit_code, signal_name, step, tail, since, when) -> dict:
    from engine.core.state import Metrics, StateSnapshot, TrainerStatus

    return StateSnapshot(time=when, seconds_since_progress=since, tail=tail, new_lines=tail[-3:],
                         trainer=TrainerStatus(pid=4242, alive=alive, exit_code=None if alive else exit_code,
                                               signal=None if alive else signal_name),
                         metrics=Metrics(step=step)).model_dump(mode="json")


REAL_SNAPSHOT = st.builds(
    _snapshot, st.booleans(), st.none() | st.integers(-64, 255), SIGNALS, st.none() | st.integers(0, 10**9),
    st.lists(st.sampled_from(["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory",
                              "loss is nan", "SIGTERM received", "Killed", "iter 40 step 10 | loss train: 5.1"]) | TEXT,
             max_size=6),
    st.floats(0, 10**5), st.floats(0, MAX_TIME))
ACTION = st.fixed_dictionaries(
    {"index": st.integers(0, MAX_INT), "verb": KEBAB, "ok": st.booleans()},
    optional={"summary": TEXT, "description": TEXT, "skipped": st.booleans(),
              "seconds": st.floats(-MAX_TIME, MAX_TIME) | st.integers(-int(MAX_TIME), int(MAX_TIME))})
PLAN_STEP = st.fixed_dictionaries({"verb": KEBAB}, optional={"description": TEXT, "params": st.dictionaries(KEBAB, JSON_LEAF, max_size=3)})
# problem() lets null through everywhere; the typed model (engine/records/incident.py) refuses it where
# the field is not Optional (the store then names the field: see the random-fields test below).
REQUIRED = {"attempt", "decision_reason"}
CHECKED = {   # every field problem() checks, with values of its real type
    **{key: COUNT if key in REQUIRED else st.none() | COUNT for key in _COUNTS},
    **{key: st.none() | SECONDS for key in _SECONDS + _TIMES},
    **{key: TEXT if key in REQUIRED else st.none() | TEXT for key in _TEXTS if key not in ("playbook", "outcome", "decision")},
    **{key: st.lists(TEXT, max_size=4) for key in _LISTS_OF_TEXT},
    "config_before": st.dictionaries(TEXT, JSON_TREE, max_size=4), "config_after": st.none() | st.dictionaries(TEXT, JSON_TREE, max_size=4),
    "snapshot": REAL_SNAPSHOT | REAL_SNAPSHOT | st.dictionaries(KEBAB, JSON_TREE, max_size=3)   # unknown keys: replay refuses
                | st.sampled_from([{"time": "yesterday"}, {"trainer": {"alive": "maybe"}}, {"metrics": {"step": "ten"}}]),
    "actions": st.lists(ACTION, max_size=4),
    "config_changes": st.dictionaries(TEXT, st.lists(JSON_LEAF, min_size=2, max_size=2), max_size=3),
    "decision": st.sampled_from(["recover", "escalate"]),
}
VALID_RECORD = st.fixed_dictionaries(
    {"id": st.integers(1, 10**15 - 1).map(lambda n: f"incident-{n}"), "playbook": KEBAB,
     "outcome": st.sampled_from(["open", "recovered", "escalated", "failed"])},
    optional={**CHECKED, "schema_version": st.sampled_from([1, 2, 3]), "plan": st.lists(PLAN_STEP, max_size=4),
              "same_as": st.none() | st.integers(1, 99).map(lambda n: f"incident-{n}"),
              "x-unknown-field": JSON_TREE})   # unknown fields are kept

NOT_A_COUNT = (st.booleans() | st.floats() | TEXT | st.integers(min_value=MAX_INT + 1, max_value=10**400)
               | st.integers(min_value=-10**400, max_value=-MAX_INT - 1))
NOT_SECONDS = (st.floats(max_value=-1e-9) | st.floats(min_value=MAX_TIME * 1.0001) | st.sampled_from([math.nan, math.inf, -math.inf])
               | st.booleans() | TEXT | st.integers(min_value=int(MAX_TIME) + 1, max_value=10**400) | st.lists(JSON_LEAF, max_size=2))
NOT_TEXT = st.booleans() | st.integers() | st.floats() | st.lists(JSON_LEAF, max_size=2) | st.dictionaries(TEXT, JSON_LEAF, max_size=2)
NOT_A_LIST_OF_TEXT = (st.booleans() | st.integers() | TEXT | st.dictionaries(TEXT, JSON_LEAF, max_size=2)
                      | st.lists(TEXT, max_size=2).flatmap(lambda ok: st.sampled_from([1, None, [], {}, True]).map(lambda bad: ok + [bad])))
NOT_AN_OBJECT = st.booleans() | st.integers() | TEXT | st.lists(JSON_LEAF, max_size=2)
NOT_AN_ID = (st.none() | st.integers() | st.sampled_from(["incident-", "incident-1234567890123456", "Incident-1", "incident-1 ",
                                                          "incident--1", "incident-1.5"])
             | TEXT.filter(lambda t: not ID_PATTERN.match(t)))
# One way to break a valid record: (the broken field, its bad values, what the reader must say).
BREAKS = (
    [("id", NOT_AN_ID, "'id'")]
    + [(key, NOT_A_COUNT, f"'{key}'") for key in _COUNTS]
    + [(key, NOT_SECONDS, f"'{key}'") for key in _SECONDS + _TIMES]
    + [(key, NOT_TEXT, f"'{key}'") for key in _TEXTS]
    + [(key, NOT_A_LIST_OF_TEXT, f"'{key}'") for key in _LISTS_OF_TEXT]
    + [(key, NOT_AN_OBJECT, f"'{key}'") for key in _OBJECTS]
    + [("actions", NOT_AN_OBJECT.filter(lambda v: not isinstance(v, list)) | st.lists(NOT_AN_OBJECT, min_size=1, max_size=2), "'actions'"),
       ("actions[].index", st.integers(max_value=-1) | st.integers(min_value=MAX_INT + 1) | st.booleans() | TEXT | st.floats(),
        "an action's 'index'"),
       ("actions[].seconds", st.sampled_from([math.nan, math.inf, -math.inf, MAX_TIME * 2, -MAX_TIME * 2]) | TEXT | st.booleans(),
        "an action's 'seconds'"),
       ("config_changes", NOT_AN_OBJECT | st.dictionaries(TEXT, st.lists(JSON_LEAF, max_size=4).filter(lambda v: len(v) != 2)
                                                             | JSON_LEAF, min_size=1, max_size=2), "'config_changes'"),
       ("outcome not one of the four", TEXT.filter(lambda t: t not in ("open", "recovered", "escalated", "failed")),
        "'outcome'"),   # the store's typed check
       ("the whole record", st.lists(JSON_LEAF, max_size=3) | JSON_LEAF, "not an object")]
)
BREAK_NAMES = [name for name, _, _ in BREAKS]


def _break(record: dict, how: str, bad) -> object:
    if how == "the whole record":
        return bad
    broken = dict(record)
    if how == "outcome not one of the four":
        how = "outcome"
    if how.startswith("actions[]."):
        action = {"index": 0, "verb": "resume", "ok": True, how.split(".")[1]: bad}
        broken["actions"] = [*(record.get("actions") or []), action]
    else:
        broken[how] = bad
    return broken


@st.composite
def incident_cases(draw):
    """[("valid", record, None), (how it is broken, the broken copy, what the reader must say)]."""
    record = draw(VALID_RECORD)
    how, bad_values, says = BREAKS[draw(st.sampled_from(range(len(BREAKS))))]
    return [("valid", record, None), (how, _break(record, how, draw(bad_values)), says)]


SHOWN: Counter = Counter()   # per fuzz run: cases by kind, and how often each formatter ran
FORMATTERS = ("incidents (table)", "incidents show", "incidents --json", "report (incident table)", "run-log entry",
              "slack: opened notice", "slack: closed notice", "replay")


def _slack_messages(incident) -> list[dict]:
    """The two notices the watcher queues for an incident, built by runbook/slack_notices.py (what
    SlackNotifier puts in the outbox), with a mention set so the escalation's head carries it."""
    from engine.watch.incident_runner import closing_summary, signature_fields
    from runbook.slack import message_problem
    from runbook.slack_notices import closed_notice, opened_notice

    title = f"{incident.playbook} ({incident.severity})"
    messages = [opened_notice(incident.id, title, incident.symptom or "",
                              {"step": str(incident.step_at_failure), "decision": incident.decision_reason,
                               **signature_fields(incident)}, queued_at=0.0)]
    SHOWN["slack: opened notice"] += 1
    messages.append(closed_notice(incident.id, incident.outcome, closing_summary(incident),
                                  escalate=incident.outcome != "recovered", mention="<!here>", queued_at=0.0))
    SHOWN["slack: closed notice"] += 1
    for message in messages:
        assert message_problem(message) is None, message   # what the sender reads back from the outbox
        assert message["incident_id"] == incident.id and len(message["text"]) <= 3000
        assert f"`{incident.id}`" in message["blocks"][-1]["elements"][0]["text"]
        for block in message["blocks"]:
            text = block.get("text", {}).get("text", "")
            assert len(text) <= (150 if block["type"] == "header" else 3000)
            assert all(len(field["text"]) <= 2000 for field in block.get("fields", []))
    return messages


@functools.lru_cache(maxsize=1)
def _shipped():
    """The shipped playbooks and run config, as `runbook replay` loads them in this repository."""
    from engine.language.loader import load_playbooks
    from engine.trainers.run_config import load_config

    loaded = load_config(REPO / "configs" / "run_config.yaml")
    return loaded, load_playbooks(loaded.playbook_paths)


def show_everywhere(record: dict, store_dir: Path) -> None:
    """A record the reader accepts, read back by the store as every command reads it, through every
    formatter that shows one: each runs, names the incident (and its playbook), and stays bounded."""
    from runbook.commands.replay_cmd import _replay_one

    (store_dir / f"{record['id']}.json").write_text(json.dumps(record))
    incident = IncidentStore(store_dir.parent).read(record["id"])   # problem() and the typed model: accepted
    shown = incident.to_json()
    rid, playbook = shown["id"], shown["playbook"]
    budget = 4_000 + 2 * len(json.dumps(shown, ensure_ascii=False))   # no formatter amplifies a record

    console = Console(file=io.StringIO(), width=120)
    incidents_cmd.out, saved = console, incidents_cmd.out
    try:
        incidents_cmd.print_table([shown])
        table = console.file.getvalue()
        SHOWN["incidents (table)"] += 1
        # The playbook column folds by design when a hostile `when` or id takes the room (seed 484377298 folded a
        # 30-character name): in a terminal the table stays within its width, and in a wide one it names both.
        assert rid in table and all(len(line) <= 120 for line in table.splitlines()), table
        console.file = io.StringIO()
        console.width = 400
        incidents_cmd.print_table([shown])
        wide = console.file.getvalue()
        assert rid in wide and playbook in wide, wide
        console.width = 120
        console.file = io.StringIO()
        incidents_cmd.print_record(shown)
        detail = console.file.getvalue()
        SHOWN["incidents show"] += 1
        assert detail.startswith(f"{rid}: {playbook} (")
    finally:
        incidents_cmd.out = saved
    row = json.loads(json.dumps(incidents_cmd.row(shown), allow_nan=False))
    SHOWN["incidents --json"] += 1
    assert row["id"] == rid and row["playbook"] == playbook
    report = "\n".join(incident_table([shown]))
    SHOWN["report (incident table)"] += 1
    assert f"| {rid} | {playbook} |" in report and len(report) <= budget
    entry = render_entry(shown)
    SHOWN["run-log entry"] += 1
    assert entry.lstrip("\n").startswith(f"### {rid} — {playbook} (") and len(entry) <= budget, len(entry)
    _slack_messages(incident)
    loaded, playbooks = _shipped()
    replayed = _replay_one(shown, playbooks, loaded, [shown], config_now=False)
    SHOWN["replay"] += 1
    if isinstance(replayed, str):   # a record replay cannot use (a snapshot that is no StateSnapshot): one sentence
        SHOWN["replay: one sentence"] += 1
        assert replayed.startswith(rid) and "\n" not in replayed and replayed.endswith("nothing was changed")
    else:
        SHOWN["replay: rendered"] += 1
        text = replayed.render()
        assert text.startswith(f"{rid}: ") and f"by '{playbook}'" in text and len(text) <= budget + 10_000
        json.dumps(replayed.to_dict(), allow_nan=False)


def check_incident_case(case, store_dir: Path) -> None:
    kind, record, says = case
    if kind == "valid":
        SHOWN["valid"] += 1
        assert problem(record) is None, problem(record)
        show_everywhere(record, store_dir)
        return
    SHOWN["broken"] += 1
    SHOWN[f"broken: {kind}"] += 1
    if kind == "outcome not one of the four":   # problem() leaves the outcome to the typed model; the store names it
        assert problem(record) is None
        with pytest.raises(BadIncidentRecord, match="'outcome'"):
            (store_dir / f"{record['id']}.json").write_text(json.dumps(record))
            IncidentStore(store_dir.parent).read(record["id"])
        return
    reason = problem(record)
    assert reason is not None and says in reason and "\n" not in reason, (kind, reason)
    if isinstance(record, dict) and kind != "id":   # the store refuses it with the same reason
        (store_dir / f"{record['id']}.json").write_text(json.dumps(record, default=str))
        with pytest.raises(BadIncidentRecord) as refused:
            IncidentStore(store_dir.parent).read(record["id"])
        assert reason in str(refused.value)


def test_incident_records_are_shown_by_every_formatter_or_refused_naming_the_field(tmp_path):
    """Valid records (>= half the cases) through every formatter; broken ones named by problem() and the store."""
    store_dir = tmp_path / "incidents"
    store_dir.mkdir()
    SHOWN.clear()
    seed = hypothesis_seed()

    @given(cases=incident_cases())
    def one_example(cases):
        for case in cases:
            for stale in store_dir.iterdir():
                stale.unlink()
            check_incident_case(case, store_dir)

    try:
        seeded(one_example, seed)()
    finally:   # the seed is said on a failure too: RUNBOOK_FUZZ_SEED=<it> makes the same cases again
        print(f"\nincident-record fuzz seed: RUNBOOK_FUZZ_SEED={seed}")
    cases = SHOWN["valid"] + SHOWN["broken"]
    record_evidence(f"incident-record fuzz ({hypothesis_profile()}, RUNBOOK_FUZZ_SEED={seed}): {cases} cases, "
                    f"{SHOWN['valid']} valid ({SHOWN['valid'] / max(cases, 1):.0%}), {SHOWN['broken']} broken in "
                    f"{sum(1 for n in BREAK_NAMES if SHOWN['broken: ' + n])} of {len(BREAKS)} named ways; formatters ran: "
                    + ", ".join(f"{name} {SHOWN[name]}" for name in FORMATTERS)
                    + f" (replay rendered {SHOWN['replay: rendered']}, refused in one sentence {SHOWN['replay: one sentence']})")
    TRIED["incident record: valid, through every formatter"] += SHOWN["valid"]
    TRIED["incident record: broken in one named way"] += SHOWN["broken"]
    assert SHOWN["valid"] >= 0.5 * cases, dict(SHOWN)
    for name in FORMATTERS:   # every valid record went through every formatter
        assert SHOWN[name] == SHOWN["valid"], (name, dict(SHOWN))
    assert SHOWN["replay: rendered"] >= 0.5 * SHOWN["valid"], dict(SHOWN)
    assert SHOWN["broken"] >= 0.1 * cases, dict(SHOWN)


# Found by the fuzz above: ID_PATTERN's \d took any Unicode digit ('incident-١' sorted as incident-1).
def test_an_id_with_a_non_ascii_digit_is_refused():
    assert problem({"id": "incident-\u0661", "playbook": "a", "outcome": "open"}) is not None


# Found by the fuzz above: replay's refusal quoted a snapshot key holding a newline as it was (two lines).
def test_a_snapshot_key_with_a_newline_is_refused_in_one_line():
    from runbook.commands.replay_cmd import _replay_one

    loaded, playbooks = _shipped()
    record = {"id": "incident-1", "playbook": "a", "outcome": "open", "snapshot": {"\n": None}}
    refused = _replay_one(record, playbooks, loaded, [record], config_now=False)
    assert isinstance(refused, str) and "\n" not in refused


@given(fields=st.dictionaries(st.sampled_from(RECORD_KEYS), values, max_size=8), valid_id=st.booleans())
def test_random_values_in_the_record_fields_are_named_or_shown(tmp_path_factory, fields, valid_id):
    """Random JSON in the fields readers use: refused naming a field the record has, or shown everywhere."""
    TRIED["incident record: random fields"] += 1
    record = {**({"id": "incident-3"} if valid_id else {}), **fields}
    reason = problem(record)
    if reason is None:
        record.setdefault("playbook", "unknown")
        if isinstance(record.get("outcome"), str) and record["outcome"] not in ("open", "recovered", "escalated", "failed"):
            return   # the store's typed check refuses it (the 'outcome' break above covers that branch)
        store_dir = tmp_path_factory.mktemp("r") / "incidents"
        store_dir.mkdir()
        try:
            show_everywhere(record, store_dir)
        except BadIncidentRecord as refused:   # the typed model refuses what problem() leaves to it (an action without a verb)
            named = re.findall(r"'([a-z_]+)[.']", str(refused))
            assert named and named[0] in record, (str(refused), record)
    else:
        named = re.findall(r"'([a-z_]+)'", reason)
        assert named and (named[0] in record or named[0] in ("id", "index", "seconds")), (reason, record)


@given(value=values)
def test_any_json_value_as_an_incident_record_is_refused_naming_why(value):
    TRIED["incident record: random JSON value"] += 1
    reason = problem(value)
    assert reason is not None and "\n" not in reason   # no random value is a record: it has no incident-N id
    if not isinstance(value, dict):
        assert reason == f"a JSON {type(value).__name__}, not an object"
    elif not (isinstance(value.get("id"), str) and ID_PATTERN.match(value["id"])):
        assert reason.startswith("'id' is ")


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


def _notice(kind: str, incident_id: str, text: str, flag: bool) -> dict:
    """A message as the notifier writes it (slack_notices' own builders), with random content."""
    from runbook import slack_notices as n

    if kind == "open":
        return n.opened_notice(incident_id, text, text, {"k": text}, 0.0)
    if kind == "update":
        return n.update_notice(incident_id, text, 0.0)
    if kind == "close":
        return n.closed_notice(incident_id, "resolved", text, flag, "@oncall" if flag else None, 0.0)
    return n.digest_notice(text, text, {}, 0.0)


notices = st.builds(_notice, st.sampled_from(["open", "update", "close", "digest"]),
                    st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=40).filter(str.strip), st.booleans())
random_messages = st.dictionaries(st.sampled_from(MESSAGE_KEYS), message_values, max_size=6) | values


@given(queue=st.lists(st.tuples(st.booleans(), notices, random_messages), min_size=0, max_size=5), first=notices)
def test_any_outbox_message_is_delivered_or_set_aside(tmp_path_factory, queue, first):
    """The sender's queue: a message it cannot use (the `{}` that held every notice behind it) is moved to
    failed/ with its reason, and every usable notice among them is handed to the sender, unchanged and in
    queue order, then delivered (done) until the queue is empty. Each queue holds at least one real notice:
    random dicts alone are never usable, so a queue of only those delivered nothing and proved nothing."""
    from runbook.outbox import Outbox
    from runbook.slack import message_problem

    messages = [first] + [notice if usable else junk for usable, notice, junk in queue]
    folder = tmp_path_factory.mktemp("o")
    box = Outbox(folder, check=message_problem)
    ids = [box.put(message) for message in messages]
    usable = [(i, json.loads(json.dumps(m))) for i, m in zip(ids, messages) if message_problem(m) is None]
    pending = box.pending()
    assert pending == usable and usable
    for msg_id, message in pending:
        {"text": message["text"], "blocks": message.get("blocks"), "key": "thread:" + message["incident_id"]}
        box.done(msg_id)
    TRIED["outbox: random messages (a queue of 1-6)"] += len(messages)
    TRIED["outbox: notices delivered"] += len(pending)
    parked = sorted(p.name for p in (folder / "failed").glob("*.json")) if (folder / "failed").is_dir() else []
    assert parked == [f"{i}.json" for i, m in zip(ids, messages) if message_problem(m) is not None]
    assert all((folder / "failed" / name.replace(".json", ".reason.txt")).is_file() for name in parked)
    assert len(box) == 0 and box.pending() == []


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
