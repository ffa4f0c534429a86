"""What the engine tells the team about incidents, and how: the Notifier protocol and its settings.

The engine only speaks to a `Notifier`; Slack (runbook/slack.py) is one adapter behind it. The
settings live here because they are part of the run config the engine validates.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field


class SlackSettings(BaseModel, extra="forbid"):
    enabled: bool = False
    bot_token_env: str = "RUNBOOK_SLACK_BOT_TOKEN"
    webhook_url_env: str = "RUNBOOK_SLACK_WEBHOOK_URL"
    channel: str | None = None
    mention: str | None = None  # e.g. "<!subteam^S0123>", added when an incident escalates
    base_url: str | None = None  # Web API base; tests point it at 127.0.0.1
    timeout_s: float = Field(default=3.0, gt=0)
    # When the watcher ends (completed, escalated, stopped) and for `runbook notify --flush`: how long
    # to keep delivering what is still queued. What is left stays in the outbox for the next try.
    delivery_timeout_s: float = Field(default=30.0, ge=0, le=86400)


@runtime_checkable
class Notifier(Protocol):
    def incident_opened(self, incident_id: str, title: str, summary: str, fields: dict[str, str]) -> None: ...
    def incident_update(self, incident_id: str, text: str) -> None: ...
    def incident_closed(self, incident_id: str, outcome: str, summary: str, escalate: bool) -> None: ...
    def digest(self, title: str, text: str, fields: dict[str, str]) -> None: ...
    def flush(self, timeout_s: float | None = None) -> None: ...
    def close(self, timeout_s: float | None = None) -> None: ...


class NullNotifier:
    """Used when Slack is disabled: every call does nothing."""

    def incident_opened(self, incident_id: str, title: str, summary: str, fields: dict[str, str]) -> None: ...
    def incident_update(self, incident_id: str, text: str) -> None: ...
    def incident_closed(self, incident_id: str, outcome: str, summary: str, escalate: bool) -> None: ...
    def digest(self, title: str, text: str, fields: dict[str, str]) -> None: ...
    def flush(self, timeout_s: float | None = None) -> None: ...
    def close(self, timeout_s: float | None = None) -> None: ...
