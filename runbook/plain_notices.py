"""The notices a webhook or an e-mail receiver gets: one JSON object per incident event, with the labels
its route matched on, as the outbox stores it and the receiver delivers it (webhook: POSTed as is).
Slack has its own richer form (runbook/slack_notices.py); this one is the typed event, nothing Slack's.

`NoticeReceiver` is the Notifier every such receiver is: queue on the caller's thread, deliver from
the outbox (runbook/outbox_sender.py)."""

from __future__ import annotations

import time
from typing import Any, Literal

from engine.core.notifier import IncidentLabels
from engine.core.text_safety import for_display
from runbook.outbox_sender import OutboxSender

Kind = Literal["open", "update", "close", "digest"]
EVENTS: dict[str, str] = {"open": "incident_opened", "update": "incident_update", "close": "incident_closed",
                          "digest": "digest"}
SCHEMA_VERSION = 1


def notice(kind: Kind, incident_id: str, title: str, text: str, *, fields: dict[str, str] | None = None,
           labels: IncidentLabels | None = None, outcome: str | None = None, escalate: bool = False,
           queued_at: float) -> dict[str, Any]:
    """PURE. Texts pass through for_display: the trainer's log lines they quote leave without secrets or escapes."""
    return {"schema": SCHEMA_VERSION, "event": EVENTS[kind], "kind": kind, "incident_id": str(incident_id),
            "title": for_display(title), "text": for_display(text),
            "fields": {for_display(str(k)): for_display(str(v)) for k, v in (fields or {}).items()},
            "severity": labels.severity if labels else None, "playbook": labels.playbook if labels else None,
            "outcome": outcome, "escalate": escalate, "queued_at": queued_at}


def notice_problem(message: Any) -> str | None:
    """Why a stored message is no notice this module wrote (a hand edit), or None."""
    if not isinstance(message, dict):
        return f"not a JSON object but {type(message).__name__}"
    if message.get("kind") not in EVENTS:
        return f"'kind' is {message.get('kind')!r}, not one of {', '.join(EVENTS)}"
    for key in ("incident_id", "title", "text"):
        if not isinstance(message.get(key), str):
            return f"'{key}' is not text"
    if not isinstance(message.get("fields"), dict):
        return "'fields' is not an object"
    return None


class NoticeReceiver(OutboxSender):
    """The Notifier API of a receiver that delivers `notice` dicts; subclasses say how one leaves."""

    def incident_opened(self, incident_id: str, title: str, summary: str, fields: dict[str, str],
                        labels: IncidentLabels | None = None) -> None:
        self._queue(notice("open", incident_id, title, summary, fields=fields, labels=labels, queued_at=time.time()))

    def incident_update(self, incident_id: str, text: str) -> None:
        self._queue(notice("update", incident_id, "", text, queued_at=time.time()))

    def incident_closed(self, incident_id: str, outcome: str, summary: str, escalate: bool,
                        labels: IncidentLabels | None = None) -> None:
        title = f"{'escalated' if escalate else 'closed'}: {outcome}"
        self._queue(notice("close", incident_id, title, summary, labels=labels, outcome=outcome, escalate=escalate,
                           queued_at=time.time()))

    def digest(self, title: str, text: str, fields: dict[str, str]) -> None:
        self._queue(notice("digest", "digest", title, text, fields=fields, queued_at=time.time()))
