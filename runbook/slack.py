"""Incident notifications to Slack: one thread per incident, never in a recovery's way. What a notice
says is runbook/slack_notices.py's (pure); this module queues and delivers it.

Callers only append to a durable on-disk outbox and return; one daemon thread
delivers the outbox strictly in order, retrying with backoff while Slack is
unreachable. Thread parents' ``ts`` values are persisted next to the outbox, so
a restarted process still replies into the right threads. Delivery is
at-least-once: a crash between Slack's answer and the outbox bookkeeping resends.

Secrets (bot token, webhook URL) are read only from environment variables and
are redacted from every log record this module or slack_sdk emits.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler
from slack_sdk.webhook import WebhookClient

from engine.core.notifier import IncidentLabels, Notifier, NullNotifier, SlackSettings
from runbook.outbox_sender import OutboxSender, Reject, Retry
from runbook.slack_notices import closed_notice, digest_notice, message_problem, opened_notice, update_notice

__all__ = ["Notifier", "NullNotifier", "SlackNotifier", "SlackSettings", "make_notifier", "message_problem"]

log = logging.getLogger(__name__)
# slack_sdk logs request URLs (a webhook URL is a secret): give it a logger we can filter.
_sdk_log = logging.getLogger(__name__ + ".sdk")

_THREAD_KEY = "thread:"
_MAX_THREADS = 1000  # thread-ts entries kept in state.json
# Errors about the payload itself: retrying the same message can never succeed.
_PAYLOAD_ERRORS = {"invalid_blocks", "invalid_blocks_format", "msg_too_long", "no_text",
                   "too_many_attachments", "invalid_attachments", "invalid_arguments", "invalid_payload"}
_LOST_PARENT_ERRORS = {"thread_not_found", "invalid_thread_ts"}


def make_notifier(settings: SlackSettings, outbox_dir: Path, environ: Mapping[str, str] = os.environ,
                  **kwargs: Any) -> Notifier:
    """NullNotifier when disabled, else a SlackNotifier; ``kwargs`` go to SlackNotifier (backoffs)."""
    if not settings.enabled:
        return NullNotifier()
    token = environ.get(settings.bot_token_env, "").strip()
    webhook = environ.get(settings.webhook_url_env, "").strip()
    if not token and not webhook:
        raise ValueError(f"Slack is enabled but neither ${settings.bot_token_env} (bot token) nor "
                         f"${settings.webhook_url_env} (incoming webhook URL) is set in the environment")
    # A bot token wins: only the Web API can thread replies.
    kwargs.setdefault("close_timeout_s", settings.delivery_timeout_s)
    return SlackNotifier(settings, outbox_dir, token=token or None, webhook_url=None if token else webhook, **kwargs)


class _RedactFilter(logging.Filter):
    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
        return True


class SlackNotifier(OutboxSender):
    label = "slack"

    def __init__(self, settings: SlackSettings, outbox_dir: Path, *, token: str | None = None,
                 webhook_url: str | None = None, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 close_timeout_s: float = 5.0) -> None:
        if not token and not webhook_url:
            raise ValueError("SlackNotifier needs a bot token or a webhook URL")
        if token and not settings.channel:
            raise ValueError(f"Slack 'channel' must be set when ${settings.bot_token_env} is used")
        self._settings = settings
        self._filter = _RedactFilter([s for s in (token, webhook_url) if s])
        for logger in (log, _sdk_log):
            logger.addFilter(self._filter)
        if _sdk_log.level == logging.NOTSET:
            _sdk_log.setLevel(logging.INFO)  # slack_sdk's DEBUG dumps every request body
        self._client: WebClient | None = None
        self._webhook: WebhookClient | None = None
        if token:
            base_url = settings.base_url or WebClient.BASE_URL
            self._client = WebClient(
                token=token, base_url=base_url if base_url.endswith("/") else base_url + "/",
                timeout=settings.timeout_s, logger=_sdk_log,  # type: ignore[arg-type]  # slack_sdk says int; urllib takes a float
                retry_handlers=[ConnectionErrorRetryHandler(), RateLimitErrorRetryHandler(max_retry_count=2)])
        else:
            self._webhook = WebhookClient(url=webhook_url, timeout=settings.timeout_s,  # type: ignore[arg-type]  # as above
                                          logger=_sdk_log)
        super().__init__(outbox_dir, message_problem, backoff_s=backoff_s, max_backoff_s=max_backoff_s,
                         close_timeout_s=close_timeout_s, join_timeout_s=settings.timeout_s + 1.0)

    # -- Notifier API (caller's thread: enqueue only) -------------------------

    def incident_opened(self, incident_id: str, title: str, summary: str, fields: dict[str, str],
                        labels: IncidentLabels | None = None) -> None:
        self._queue(opened_notice(incident_id, title, summary, fields, queued_at=time.time()))

    def incident_update(self, incident_id: str, text: str) -> None:
        self._queue(update_notice(incident_id, text, queued_at=time.time()))

    def incident_closed(self, incident_id: str, outcome: str, summary: str, escalate: bool,
                        labels: IncidentLabels | None = None) -> None:
        self._queue(closed_notice(incident_id, outcome, summary, escalate, self._settings.mention or None,
                                  queued_at=time.time()))

    def digest(self, title: str, text: str, fields: dict[str, str]) -> None:
        """A periodic summary (engine/watch/upkeep.py): a top-level message, in no incident's thread."""
        self._queue(digest_notice(title, text, fields, queued_at=time.time()))

    def _closed_hook(self) -> None:
        for logger in (log, _sdk_log):
            logger.removeFilter(self._filter)

    def _deliver(self, message: dict[str, Any]) -> None:
        send = self._send_webhook if self._webhook is not None else self._send_web_api
        payload: dict[str, Any] = {"text": message["text"], "blocks": message.get("blocks")}
        try:
            send(message, dict(payload))
        except Reject as exc:
            if not payload.pop("blocks"):
                raise
            log.warning("slack: blocks rejected (%s); sending text only", exc)
            send(message, payload)

    def _send_web_api(self, message: dict[str, Any], payload: dict[str, Any]) -> None:
        assert self._client is not None
        key = _THREAD_KEY + message["incident_id"]
        payload["channel"] = self._settings.channel
        if message["kind"] not in ("open", "digest"):
            parent = self._outbox.state_get(key)
            if not (isinstance(parent, dict) and isinstance(parent.get("ts"), str) and isinstance(parent.get("channel"), str)):
                parent = None   # a hand-edited state.json: a reply at top level beats a sender stuck on a TypeError
            if parent:
                payload.update(channel=parent["channel"], thread_ts=parent["ts"])
                if message.get("broadcast"):
                    payload["reply_broadcast"] = True
            else:  # the parent never went through this outbox: do not hold the queue for it
                log.warning("slack: no thread known for incident %s; posting at top level", message["incident_id"])
        try:
            response = self._client.chat_postMessage(**payload)
        except SlackApiError as exc:
            error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
            if "thread_ts" in payload and error in _LOST_PARENT_ERRORS:
                self._outbox.state_delete(key)  # next attempt goes top level
            raise _classify(exc.response.status_code, error, exc.response.headers) from None
        except Exception as exc:  # connection refused, timeout, ...
            raise Retry(f"{type(exc).__name__}: {self._filter.redact(str(exc))}") from None
        if message["kind"] == "open":
            self._outbox.state_set(key, {"ts": response["ts"], "channel": response["channel"]}, max_keys=_MAX_THREADS)

    def _send_webhook(self, message: dict[str, Any], payload: dict[str, Any]) -> None:
        assert self._webhook is not None
        try:
            response = self._webhook.send_dict(payload)
        except Exception as exc:
            raise Retry(f"{type(exc).__name__}: {self._filter.redact(str(exc))}") from None
        # WebhookClient returns (does not raise) on HTTP errors, 429 included.
        if response.status_code != 200:
            error = (response.body or "").strip()[:100]
            raise _classify(response.status_code, "invalid_payload" if response.status_code == 400 else error,
                            response.headers)


def _classify(status: int, error: str | None, headers: Mapping[str, Any]) -> Exception:
    if status == 429:
        return Retry("rate limited (HTTP 429)", retry_after=_retry_after(headers))
    if error in _PAYLOAD_ERRORS:
        return Reject(error)
    # 5xx, timeouts, and also auth/channel errors: keep the message queued until
    # Slack or the configuration is fixed; nothing behind it may overtake it.
    return Retry(f"HTTP {status}" + (f" {error}" if error else ""))


def _retry_after(headers: Mapping[str, Any]) -> float | None:
    raw = {str(k).lower(): v for k, v in (headers or {}).items()}.get("retry-after")
    value = raw[0] if isinstance(raw, list) else raw
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
