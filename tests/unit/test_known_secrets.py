"""Secret values runbook knows (trainer.env, the notifiers' tokens) are redacted by value wherever text
leaves runbook, however a template printed them (issue 45, item 1)."""

from __future__ import annotations

import io
import json

import pytest

from engine.core.events import IncidentOpened
from engine.core.known_secrets import secret_name
from engine.core.text_safety import forget_secrets, redact, redact_tree
from engine.records.incident import Incident
from engine.records.incident_store import IncidentStore
from engine.records.journal import Journal
from engine.records.run_log import append_entry
from engine.trainers.run_config import load_config
from runbook.console import PlainReporter
from runbook.slack_notices import closed_notice

WANDB = "3f9a1c07be52d46e8a0b9c1d2e3f4a5b6c7d8e9f"     # a W&B key: 40 hex, no prefix any pattern knows
AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SLACK = "Zq8-not-a-slack-shaped-token"


@pytest.fixture
def known(project, monkeypatch):
    """The toy project's config with secrets in trainer.env and a notifier token, loaded the real way."""
    monkeypatch.setenv("MY_BOT", SLACK)
    project.set(trainer={"env": {"WANDB_API_KEY": WANDB, "AWS_SECRET_ACCESS_KEY": AWS, "TOKENIZERS_PARALLELISM": "false"}},
                notifications={"slack": {"enabled": False, "bot_token_env": "MY_BOT"}})
    forget_secrets()
    load_config(project.config)
    yield project
    forget_secrets()


def leaked(text: str) -> list[str]:
    lowered = text.lower()
    return [v for v in (WANDB, AWS, SLACK) if v in text or v.lower() in lowered or v[::-1].lower() in lowered]


def printed(note: str) -> Incident:
    """An incident whose template printed `note` (a record note), its snapshot's log tail too."""
    snapshot = {"trainer": {"alive": False, "exit_code": 1}, "tail": [note]}
    return Incident(schema_version=3, id="incident-1", playbook="unknown-crash", outcome="escalated",
                    opened_at_iso="2026-12-02T10:00:00+00:00", snapshot=snapshot, log_excerpt=[note], notes=[note])


NOTES = [f"wandb: {WANDB}", f"aws {AWS} done", f"{WANDB[::-1]} {AWS.upper()} {SLACK.lower()}",
         f"key={WANDB.upper()[::-1]}"]


@pytest.mark.parametrize("note", NOTES)
def test_a_known_secret_printed_alone_reversed_or_case_folded_never_leaves_runbook(known, tmp_path, note):
    incident = printed(note)
    run_log = tmp_path / "run-log.md"
    assert append_entry(run_log, incident.to_json())
    record = IncidentStore(tmp_path / "incidents").write(incident).read_text()
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append("incident_opened", incident=incident.id, playbook="unknown-crash", decision="escalate",
                   snapshot=incident.snapshot)
    stream = io.StringIO()
    PlainReporter(stream)(IncidentOpened(incident.model_copy(update={"symptom": note}).view()))
    slack = json.dumps(closed_notice("incident-1", "escalated", note, True, None, 1.0))
    for where, text in {"run log": run_log.read_text(), "record": record, "journal": journal.path.read_text(),
                        "console": stream.getvalue(), "slack": slack}.items():
        assert not leaked(text), (where, text)
        assert "[REDACTED]" in text, where


def test_the_journal_keeps_no_token_the_trainer_printed_in_an_incident_snapshot(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append("incident_opened", incident="incident-1", playbook="unknown-crash", decision="escalate",
                   snapshot={"tail": ["HF_TOKEN=hf_" + "Q" * 30]})
    text = journal.path.read_text()
    assert "hf_QQQ" not in text and "HF_TOKEN=[REDACTED]" in text
    assert journal.entries()[0]["snapshot"]["tail"] == ["HF_TOKEN=[REDACTED]"]   # still a whole, valid line


def test_other_values_are_left_alone(known):
    assert redact("TOKENIZERS_PARALLELISM=false step 3 loss 2.5") == "TOKENIZERS_PARALLELISM=false step 3 loss 2.5"


def test_secret_names_are_told_by_their_words():
    assert all(map(secret_name, ["WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "DB_PASSWORD", "GCP_CREDENTIALS"]))
    assert not any(map(secret_name, ["TOKENIZERS_PARALLELISM", "MONKEY_PATCH", "CUDA_VISIBLE_DEVICES"]))


def test_a_bare_bearer_token_and_a_secret_inside_a_dict_key_are_redacted():
    assert redact("curl -H 'Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig'") == "curl -H 'Bearer [REDACTED]'"
    token = "hf_" + "Z" * 34
    tree = redact_tree({f"HF_TOKEN={token}": {f"nested {token}": token}})
    assert token not in json.dumps(tree) and "HF_TOKEN=[REDACTED]" in tree
