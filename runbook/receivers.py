"""The notifications' routing, as Alertmanager routes alerts: the receivers are a list, each takes the
incidents its `match` takes (severities, playbooks), and the default receiver takes what none took.
An incident's later notices (updates, its close) follow the receivers its opening went to, so a thread
is never split; an incident this process never saw open (a watcher re-attached mid-incident) is routed
by the labels its close carries, or to the receivers that take everything. Digests go to the receivers
that take everything.

`make_notifier` builds the lot from `notifications:` in the run config and the environment (secrets
are read only from the variables the settings name)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Mapping

from engine.core.notifier import (EmailReceiver, IncidentLabels, NotificationSettings, Notifier, NullNotifier,
                                  SlackReceiver, SlackSettings, WebhookReceiver)

Receiver = SlackReceiver | WebhookReceiver | EmailReceiver


class RoutingNotifier:
    """A Notifier that hands each notice to the receivers its incident's route names."""

    def __init__(self, routes: list[tuple[Notifier, Receiver | None]], default: str | None = None) -> None:
        # None settings: the legacy `slack:` section, which takes everything
        self.routes, self.default = routes, default
        self._chosen: dict[str, list[Notifier]] = {}
        self._lock = threading.Lock()

    @property
    def notifiers(self) -> list[Notifier]:
        return [notifier for notifier, _ in self.routes]

    def receivers_for(self, labels: IncidentLabels | None) -> list[Notifier]:
        """PURE given the routes. Who gets an incident with these labels (None: unknown)."""
        def takes(settings: Receiver | None) -> bool:
            if settings is None or settings.match.everything:
                return True
            return labels is not None and settings.match.takes(labels)

        chosen = [n for n, s in self.routes if (s is None or s.name != self.default) and takes(s)]
        if not chosen:
            chosen = [n for n, s in self.routes if s is not None and s.name == self.default]
        return chosen

    def _route(self, incident_id: str, labels: IncidentLabels | None, forget: bool = False) -> list[Notifier]:
        with self._lock:
            chosen = self._chosen.get(incident_id)
            if chosen is None:
                chosen = self.receivers_for(labels)
                if not forget:
                    self._chosen[incident_id] = chosen
            elif forget:
                del self._chosen[incident_id]
            return chosen

    def incident_opened(self, incident_id: str, title: str, summary: str, fields: dict[str, str],
                        labels: IncidentLabels | None = None) -> None:
        with self._lock:
            self._chosen.pop(incident_id, None)   # a reopened id routes afresh
        for notifier in self._route(incident_id, labels):
            notifier.incident_opened(incident_id, title, summary, fields, labels=labels)

    def incident_update(self, incident_id: str, text: str) -> None:
        for notifier in self._route(incident_id, None):
            notifier.incident_update(incident_id, text)

    def incident_closed(self, incident_id: str, outcome: str, summary: str, escalate: bool,
                        labels: IncidentLabels | None = None) -> None:
        for notifier in self._route(incident_id, labels, forget=True):
            notifier.incident_closed(incident_id, outcome, summary, escalate, labels=labels)

    def digest(self, title: str, text: str, fields: dict[str, str]) -> None:
        for notifier, settings in self.routes:
            if settings is None or settings.match.everything:
                notifier.digest(title, text, fields)

    def flush(self, timeout_s: float | None = None) -> None:
        for notifier in self.notifiers:
            notifier.flush(timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        # In parallel: each receiver has the whole bound, one down server does not eat another's.
        threads = [threading.Thread(target=n.close, args=(timeout_s,), daemon=True) for n in self.notifiers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def outbox_dirs(settings: NotificationSettings, outbox: Path) -> list[Path]:
    """Every outbox the settings deliver from: the legacy Slack's is `outbox` itself."""
    return [outbox] * settings.slack.enabled + [outbox / r.name for r in settings.receivers]


def make_notifier(settings: NotificationSettings, outbox: Path, environ: Mapping[str, str] = os.environ,
                  **kwargs: Any) -> Notifier:
    """NullNotifier when no receiver is enabled, else a RoutingNotifier. Raises ValueError (one sentence)
    when a receiver's secret variable is missing. ``kwargs`` go to every sender (backoffs)."""
    from runbook.slack import make_notifier as make_slack

    routes: list[tuple[Notifier, Receiver | None]] = []
    try:
        if settings.slack.enabled:
            routes.append((make_slack(settings.slack, outbox, environ, **kwargs), None))
        for receiver in settings.receivers:
            routes.append((_make_receiver(receiver, outbox / receiver.name, environ, kwargs), receiver))
    except ValueError:
        for notifier, _ in routes:
            notifier.close(0)
        raise
    return RoutingNotifier(routes, settings.default_receiver) if routes else NullNotifier()


def _make_receiver(receiver: Receiver, outbox: Path, environ: Mapping[str, str], kwargs: dict[str, Any]) -> Notifier:
    def secret(name: str | None, what: str) -> str | None:
        if name is None:
            return None
        value = environ.get(name, "").strip()
        if not value:
            raise ValueError(f"receiver {receiver.name!r}: ${name} ({what}) is not set in the environment")
        return value

    if isinstance(receiver, SlackReceiver):
        from runbook.slack import make_notifier as make_slack

        return make_slack(SlackSettings(**receiver.model_dump(include=set(SlackSettings.model_fields))), outbox, environ,
                          **kwargs)
    if isinstance(receiver, WebhookReceiver):
        from runbook.webhook import WebhookNotifier

        url = receiver.url or secret(receiver.url_env, "the webhook's URL")
        assert url is not None
        return WebhookNotifier(receiver, outbox, url=url, token=secret(receiver.token_env, "its bearer token"),
                               **kwargs)
    from runbook.email_receiver import EmailNotifier

    return EmailNotifier(receiver, outbox, username=secret(receiver.username_env, "the SMTP user"),
                         password=secret(receiver.password_env, "the SMTP password"), **kwargs)
