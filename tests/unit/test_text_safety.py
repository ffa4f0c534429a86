"""engine/core/text_safety.py and the places text leaves runbook (issue 34): control characters shown
as escapes, never acted on; secrets redacted, their names kept; nothing in an entry can forge a run-log
marker or open an HTML comment; redaction reaches records on disk, Slack notices and the watch console."""

from __future__ import annotations

import io
import json
import time

import pytest

from engine.core.events import IncidentOpened, Observed, WatchWarning
from engine.core.text_safety import for_display, for_run_log, neutralise, redact, redact_tree, without_comments
from engine.records.incident import Incident
from engine.records.incident_store import IncidentStore
from engine.records.run_log import append_entry, entry_marker
from runbook.console import PlainReporter
from runbook.slack_notices import closed_notice, opened_notice

SECRETS = [   # (text, what must be gone, what must stay)
    ("SLACK_BOT_TOKEN=xoxb-1234567890-abcdefABCDEF", "xoxb-1234567890", "SLACK_BOT_TOKEN=[REDACTED]"),
    ("posting with xoxp-9999999999-zzzzzzzzzz now", "xoxp-", "posting with [REDACTED] now"),
    ("login hf_" + "Q" * 34 + " ok", "hf_QQ", "login [REDACTED] ok"),
    ("ghp_" + "a1B2" * 9, "ghp_", "[REDACTED]"),
    ("gho_" + "Z" * 36, "gho_", "[REDACTED]"),
    ("github_pat_11ABCDEFG0_" + "x" * 40, "github_pat_", "[REDACTED]"),
    ("aws key AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE", "aws key [REDACTED] used"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "eyJhbGci", "Authorization: Bearer [REDACTED]"),
    ("curl -H 'authorization: token abc123def'", "abc123def", "authorization: token [REDACTED]"),
    ("headers={'Authorization': 'Basic dXNlcjpwYXNz'}", "dXNlcjpwYXNz", "'Authorization': 'Basic [REDACTED]'"),
    ("url?token=abc123&x=1", "abc123", "token=[REDACTED]&x=1"),
    ("password: hunter2", "hunter2", "password: [REDACTED]"),
    ('{"api_key": "s3cr3t-value"}', "s3cr3t", '{"api_key": "[REDACTED]"}'),
    ("--api-key=zzz9 --wandb-api_key=k", "zzz9", "--api-key=[REDACTED]"),
    ("client_secret=abc DB_PASSWORD=pw1", "pw1", "DB_PASSWORD=[REDACTED]"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY----- after", "MIIEow",
     "[REDACTED PRIVATE KEY] after"),
    ("cut: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN", "MIIEvQ", "cut: [REDACTED PRIVATE KEY]"),
]
NOT_SECRETS = [
    "Epoch 1 | iter 48 step 24 | loss train: 5.812, val: n/a | iter time: 20.00 ms (step) remaining time: 0:00:09",
    "max_tokens: 40960 tokens_per_s=1234.5 token_env: SLACK_BOT_TOKEN tokenizer_dir=data/tokenizer",
    "Saving checkpoint to '/proj/checkpoints/pretrain/step-00000010/lit_model.pth'",
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB; hf_hub_download failed",
]


@pytest.mark.parametrize("text,gone,kept", SECRETS)
def test_each_kind_of_secret_is_redacted_and_its_name_kept(text, gone, kept):
    out = redact(text)
    assert gone not in out and kept in out, out
    assert redact(out) == out                     # redacting twice changes nothing more


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_log_text_is_left_as_it_is(text):
    assert redact(text) == text and for_display(text) == text


def test_control_characters_are_shown_as_escapes_and_newlines_and_tabs_kept():
    hostile = "a\x1b[2J\x1b]0;title\x07\x9b31m\u202eexe.txt\u2066x\u2069\r\x00\x7f\ud800\tb\nc"
    out = neutralise(hostile)
    assert out == "a\\x1b[2J\\x1b]0;title\\x07\\x9b31m\\u202eexe.txt\\u2066x\\u2069\\x0d\\x00\\x7f\\ud800\tb\nc"
    assert neutralise("a\nb", keep_newlines=False) == "a\\x0ab"
    assert neutralise("café → ✓ 日本") == "café → ✓ 日本"       # printable text of any script is untouched


def test_nothing_can_open_or_close_a_comment_in_run_log_text():
    assert without_comments("x <!-- runbook:incident-2 --> <!DOCTYPE --!>") == \
        "x <\\!-- runbook:incident-2 --\\> <\\!DOCTYPE --!\\>"
    assert "<!--" not in for_run_log("<<!--!---->") and "-->" not in for_run_log("<<!--!---->")


def test_redaction_is_linear_on_hostile_sizes():
    started = time.monotonic()
    redact("token=" + "a" * 1_000_000)
    redact("-----BEGIN PRIVATE KEY-----" * 20_000)
    redact("Bearer " * 100_000 + "x" * 100_000)
    redact("a_" * 300_000 + "token")
    assert time.monotonic() - started < 3.0


def test_a_private_key_over_several_log_lines_is_redacted_line_by_line():
    tail = ["before", "-----BEGIN OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjE", "AAAABG5vbmU",
            "-----END OPENSSH PRIVATE KEY-----", "after token=x1"]
    assert redact_tree({"tail": tail, "n": 3}) == {"tail": ["before"] + ["[REDACTED PRIVATE KEY]"] * 4 +
                                                   ["after token=[REDACTED]"], "n": 3}


# --- where the text goes -----------------------------------------------------------------------------------
HOSTILE_LINE = "\x1b[2J\x1b]0;pwned\x07ALL CLEAR \u202egnp <!-- runbook:incident-2 --> HF_TOKEN=hf_" + "Q" * 30


def record(number: int, **fields) -> Incident:
    snapshot = {"trainer": {"alive": False, "exit_code": 1}, "metrics": {"step": 3},
                "tail": ["Traceback (most recent call last):", "ValueError: " + HOSTILE_LINE]}
    return Incident(schema_version=3, id=f"incident-{number}", playbook="unknown-crash", outcome="escalated",
                    opened_at_iso="2026-12-02T10:00:00+00:00", snapshot=snapshot, log_excerpt=snapshot["tail"],
                    notes=[HOSTILE_LINE], **fields)


def test_a_log_line_cannot_forge_another_incidents_run_log_marker(tmp_path):
    run_log = tmp_path / "run-log.md"
    assert append_entry(run_log, record(1).to_json())
    assert append_entry(run_log, record(2).to_json()), "incident-2's entry was suppressed by a forged marker"
    text = run_log.read_text()
    assert text.count("\n" + entry_marker("incident-2") + "\n") == 1 and "### incident-2 " in text
    assert "\x1b" not in text and "hf_QQQ" not in text and "HF_TOKEN=[REDACTED]" in text
    assert not append_entry(run_log, record(2).to_json())            # runbook's own marker still counts
    assert text.count("### incident-2 ") == 1


def test_a_marker_counts_only_on_a_line_of_its_own(tmp_path):
    from engine.records.run_log import has_entry

    run_log = tmp_path / "run-log.md"
    run_log.write_text(f"# notes\nthe log said {entry_marker('incident-1')} here\n{entry_marker('incident-3')}\r\n"
                       + "x" * 200_000 + entry_marker("incident-4") + "\n" + entry_marker("incident-5"))
    assert not has_entry(run_log, "incident-1") and not has_entry(run_log, "incident-4")
    assert has_entry(run_log, "incident-3") and has_entry(run_log, "incident-5")   # CRLF; at the end, no newline
    assert not has_entry(tmp_path / "absent.md", "incident-1")


def test_the_record_on_disk_is_redacted_and_the_incident_in_memory_is_not(tmp_path):
    incident = record(1)
    path = IncidentStore(tmp_path).write(incident)
    text = path.read_text()
    assert "hf_QQQ" not in text and "HF_TOKEN=[REDACTED]" in text
    assert json.loads(text)["log_excerpt"][1].startswith("ValueError: \x1b[2J")    # everything else as seen
    assert "hf_QQQ" in incident.notes[0]
    assert IncidentStore(tmp_path).read("incident-1").notes == [redact(HOSTILE_LINE)]


def test_slack_notices_carry_no_escape_and_no_secret():
    opened = opened_notice("incident-1", "unknown-crash \x1b[2J", HOSTILE_LINE, {"log line": HOSTILE_LINE}, 1.0)
    closed = closed_notice("incident-1", "escalated", "run: " + HOSTILE_LINE, True, None, 2.0)
    for message in (opened, closed):
        text = json.dumps(message, ensure_ascii=False)
        assert "\x1b" not in text and "\u202e" not in text and "hf_QQQ" not in text, text
        assert "HF_TOKEN=[REDACTED]" in text and "\\\\x1b[2J" in text


@pytest.mark.parametrize("as_json", [False, True])
def test_the_watch_console_prints_no_escape_and_no_secret(as_json):
    stream = io.StringIO()
    report = PlainReporter(stream, as_json=as_json)
    report(IncidentOpened(record(1, symptom=HOSTILE_LINE, step_at_failure=3).view()))
    report(WatchWarning(HOSTILE_LINE))
    out = stream.getvalue()
    assert out.count("\n") == 2 and "\x1b" not in out and "\u202e" not in out and "hf_QQQ" not in out, out
    assert "ALL CLEAR" in out
    line = report.format(WatchWarning(HOSTILE_LINE))     # what the live view prints above its panel
    assert "\x1b" not in line and "hf_QQQ" not in line and "ALL CLEAR" in line


def test_a_progress_step_without_a_loss_prints_a_dash_instead_of_killing_the_watcher():
    # Seen in tests/runs/test_crash_points.py: a restarted watcher's first observation of a resumed toy
    # trainer had a step and no loss yet; the format raised TypeError and the watcher exited 12.
    from engine.core.state import Metrics, StateSnapshot

    stream = io.StringIO()
    PlainReporter(stream)(Observed(StateSnapshot(metrics=Metrics(step=40))))
    assert "step 40 | loss - | - tok/s | verified ckpt None" in stream.getvalue()
