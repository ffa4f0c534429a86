"""What the engine tells the team about incidents, and how: the Notifier protocol and its settings.

The engine only speaks to a `Notifier`; the receivers (Slack: runbook/slack.py, a generic webhook:
runbook/webhook.py, e-mail: runbook/email_receiver.py) sit behind it, routed by runbook/receivers.py
as Alertmanager routes: each receiver has a `match` (severities, playbooks), one may be the default
route for what no other matched. The settings live here because they are part of the run config the
engine validates, and because the trainer's environment is scrubbed of every variable they name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol, Union, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Severity = Literal["info", "warning", "critical"]
_RECEIVER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class IncidentLabels:
    """What a route matches an incident's notices on (Alertmanager's labels)."""

    severity: str
    playbook: str


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

    def secret_env_names(self) -> set[str]:
        return {self.bot_token_env, self.webhook_url_env}


class ReceiverMatch(BaseModel):
    """Which incidents a receiver gets: every listed condition must hold; an empty match takes all."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    severities: list[Severity] = Field(default_factory=list, description="info, warning, critical; empty: any")
    playbooks: list[str] = Field(default_factory=list, description="playbook names (its class of failure); empty: any")

    @property
    def everything(self) -> bool:
        return not self.severities and not self.playbooks

    def takes(self, labels: IncidentLabels) -> bool:
        return ((not self.severities or labels.severity in self.severities)
                and (not self.playbooks or labels.playbook in self.playbooks))


class _Receiver(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(description="names the receiver in logs and its outbox folder <run_dir>/outbox/<name>")
    match: ReceiverMatch = Field(default_factory=ReceiverMatch, description="which incidents it gets")
    timeout_s: float = Field(10.0, gt=0, le=600, description="bound on one delivery attempt")
    delivery_timeout_s: float = Field(30.0, ge=0, le=86400, description="when the watcher ends: how long to keep "
                                      "delivering what is queued; the rest stays in the outbox")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _RECEIVER_NAME.match(value) or value == "failed":   # outbox/failed/ holds parked notices
            raise ValueError(f"{value!r}: lower-case letters, digits, _ and -, not 'failed'")
        return value

    def secret_env_names(self) -> set[str]:
        return set()


def _env_names(*names: str | None) -> set[str]:
    return {name for name in names if name}


def _check_env_name(value: str | None) -> str | None:
    if value is not None and not _ENV_NAME.match(value):
        raise ValueError(f"{value!r} is not an environment variable's name (the secret itself never goes here)")
    return value


class SlackReceiver(_Receiver, SlackSettings):
    """A Slack receiver in `receivers:`; listing it enables it."""

    kind: Literal["slack"]
    enabled: bool = True


class WebhookReceiver(_Receiver):
    """POSTs each notice as JSON; a 5xx, 408, 429 or an unreachable server is retried from the outbox."""

    kind: Literal["webhook"]
    url: str | None = Field(None, pattern=r"^https?://", description="the endpoint, when it is no secret")
    url_env: str | None = Field(None, description="the variable holding the endpoint, when it is a secret")
    token_env: str | None = Field(None, description="the variable holding a bearer token (Authorization header)")

    @field_validator("url_env", "token_env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        return _check_env_name(value)

    @model_validator(mode="after")
    def _one_url(self) -> "WebhookReceiver":
        if (self.url is None) == (self.url_env is None):
            raise ValueError("give exactly one of url and url_env")
        return self

    def secret_env_names(self) -> set[str]:
        return _env_names(self.url_env, self.token_env)


class EmailReceiver(_Receiver):
    """Sends each notice as a mail through an SMTP server (python's smtplib)."""

    # populate_by_name: the run config is dumped by field name and validated again (scratch runs, write-back)
    model_config = ConfigDict(populate_by_name=True)

    kind: Literal["email"]
    host: str = Field(min_length=1)
    port: int = Field(587, gt=0, le=65535)
    from_addr: str = Field(alias="from", min_length=3, pattern="@")
    to: list[Annotated[str, Field(pattern="@")]] = Field(min_length=1)
    starttls: bool = Field(True, description="upgrade the connection with STARTTLS before logging in")
    username_env: str | None = Field(None, description="the variable holding the SMTP user name")
    password_env: str | None = Field(None, description="the variable holding the SMTP password")

    @field_validator("username_env", "password_env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        return _check_env_name(value)

    def secret_env_names(self) -> set[str]:
        return _env_names(self.username_env, self.password_env)


Receiver = Annotated[Union[SlackReceiver, WebhookReceiver, EmailReceiver], Field(discriminator="kind")]


class NotificationSettings(BaseModel):
    """`notifications:` in the run config. `slack:` alone is the config before receivers, kept as it was:
    one Slack receiver that takes every incident, its outbox <run_dir>/outbox."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    slack: SlackSettings = Field(default_factory=SlackSettings)
    receivers: list[Receiver] = Field(default_factory=list, description="each gets the incidents its match takes")
    default_receiver: str | None = Field(None, description="a receiver (with no match) that gets only the "
                                         "incidents no other receiver took: Alertmanager's default route")

    @model_validator(mode="after")
    def _names(self) -> "NotificationSettings":
        names = [r.name for r in self.receivers]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"receivers: the name(s) {', '.join(twice)} appear more than once")
        if self.default_receiver is not None:
            found = [r for r in self.receivers if r.name == self.default_receiver]
            if not found:
                raise ValueError(f"default_receiver: no receiver is named {self.default_receiver!r}")
            if not found[0].match.everything:
                raise ValueError(f"default_receiver: {self.default_receiver!r} has a match; the default route "
                                 "takes what no other receiver matched")
        return self

    def secret_env_names(self) -> set[str]:
        """Every variable a receiver reads a secret from: never the trainer's (engine/process/trainer_env.py)."""
        return self.slack.secret_env_names().union(*(r.secret_env_names() for r in self.receivers))


@runtime_checkable
class Notifier(Protocol):
    # labels: what the receivers' routes match on; None where unknown (routed to the receivers taking all)
    def incident_opened(self, incident_id: str, title: str, summary: str, fields: dict[str, str],
                        labels: IncidentLabels | None = None) -> None: ...
    def incident_update(self, incident_id: str, text: str) -> None: ...
    def incident_closed(self, incident_id: str, outcome: str, summary: str, escalate: bool,
                        labels: IncidentLabels | None = None) -> None: ...
    def digest(self, title: str, text: str, fields: dict[str, str]) -> None: ...
    def flush(self, timeout_s: float | None = None) -> None: ...
    def close(self, timeout_s: float | None = None) -> None: ...


class NullNotifier:
    """Used when no receiver is enabled: every call does nothing."""

    def incident_opened(self, incident_id: str, title: str, summary: str, fields: dict[str, str],
                        labels: IncidentLabels | None = None) -> None: ...
    def incident_update(self, incident_id: str, text: str) -> None: ...
    def incident_closed(self, incident_id: str, outcome: str, summary: str, escalate: bool,
                        labels: IncidentLabels | None = None) -> None: ...
    def digest(self, title: str, text: str, fields: dict[str, str]) -> None: ...
    def flush(self, timeout_s: float | None = None) -> None: ...
    def close(self, timeout_s: float | None = None) -> None: ...
