"""The generic webhook receiver: each notice (runbook/plain_notices.py) POSTed as JSON. A 2xx is delivered;
408, 429 and 5xx, a timeout or a refused connection are retried from the outbox with backoff (nothing
behind the notice overtakes it); any other 4xx will never be accepted and is parked in outbox/failed/."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from engine.core.notifier import WebhookReceiver
from runbook.outbox_sender import Reject, Retry
from runbook.plain_notices import NoticeReceiver, notice_problem

_RETRIED = {408, 425, 429}


class WebhookNotifier(NoticeReceiver):
    def __init__(self, settings: WebhookReceiver, outbox_dir: Path, *, url: str, token: str | None = None,
                 **kwargs: Any) -> None:
        self.label = f"webhook {settings.name}"
        self._settings, self._url, self._token = settings, url, token
        kwargs.setdefault("close_timeout_s", settings.delivery_timeout_s)
        super().__init__(outbox_dir, notice_problem, join_timeout_s=settings.timeout_s + 1.0, **kwargs)

    def _deliver(self, message: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/json", "User-Agent": "runbook"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        body = json.dumps(message, ensure_ascii=False, allow_nan=False).encode("utf-8")
        request = urllib.request.Request(self._url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._settings.timeout_s) as response:
                response.read(65536)
        except urllib.error.HTTPError as error:
            retry_after = _seconds(error.headers.get("Retry-After")) if error.headers else None
            if error.code in _RETRIED or error.code >= 500:
                raise Retry(f"HTTP {error.code}", retry_after=retry_after) from None
            raise Reject(f"HTTP {error.code}") from None
        except (OSError, ValueError) as error:   # refused, timed out, DNS: the URL may be a secret, never quoted
            raise Retry(type(error).__name__ + (f" ({error.reason})" if isinstance(error, urllib.error.URLError)
                                                 else "")) from None


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
