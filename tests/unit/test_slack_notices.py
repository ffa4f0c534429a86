"""runbook/slack_notices.py: what a notice says, within Slack's limits (pure: no server needed; the
delivery of these messages is tests/unit/test_slack.py's, through slack_sdk and a fake Slack)."""

from __future__ import annotations

from runbook.slack_notices import (closed_notice, digest_notice, message_problem, opened_notice, update_notice)


def test_fields_go_ten_to_a_section_and_every_text_is_clipped_to_slacks_limits():
    fields = {f"field {i}": "v" * 3000 for i in range(12)}
    message = opened_notice("incident-3", "t" * 400, "s <b> & c", fields, queued_at=5.0)
    header, summary, first, second, context = message["blocks"]
    assert header["type"] == "header" and len(header["text"]["text"]) == 150 and header["text"]["text"].endswith("…")
    assert summary["text"]["text"] == "s &lt;b&gt; &amp; c"
    assert (len(first["fields"]), len(second["fields"])) == (10, 2)
    assert all(len(f["text"]) == 2000 for f in first["fields"] + second["fields"])
    assert context["elements"][0]["text"] == "incident `incident-3`"
    assert len(message["text"]) <= 3000 and message["queued_at"] == 5.0 and message_problem(message) is None


def test_an_escalation_mentions_and_broadcasts_a_closing_does_not():
    calm = closed_notice("i-1", "recovered", "lost 12 s", escalate=False, mention="<!here>", queued_at=0.0)
    loud = closed_notice("i-1", "gave up", "", escalate=True, mention="<!here>", queued_at=0.0)
    quiet = closed_notice("i-1", "gave up", "", escalate=True, mention=None, queued_at=0.0)
    assert calm["text"] == ":white_check_mark: *Closed*: recovered\nlost 12 s" and calm["broadcast"] is False
    assert loud["text"] == "<!here> :rotating_light: *Escalated*: gave up" and loud["broadcast"] is True
    assert quiet["text"] == ":rotating_light: *Escalated*: gave up"


def test_a_digest_is_in_no_incidents_thread_and_an_update_is_escaped():
    digest = digest_notice("Daily", "all <ok>", {"steps": "40"}, queued_at=0.0)
    assert digest["kind"] == "digest" and not any(b["type"] == "context" for b in digest["blocks"])
    update = update_notice("i-2", "a <tag>", queued_at=0.0)
    assert update["text"] == "a &lt;tag&gt;" and update["blocks"][-1]["type"] == "context"


def test_message_problem_names_what_the_sender_cannot_use():
    assert message_problem({}) == "'kind' is missing, not one of open, update, close, digest"
    assert message_problem([]) == "not a JSON object but list"
    assert message_problem({"kind": "open", "text": " ", "incident_id": "i"}) == "'text' is empty"
    assert message_problem({"kind": "open", "text": "x", "incident_id": "i", "broadcast": "yes"}) \
        == "'broadcast' is 'yes', not true or false"
