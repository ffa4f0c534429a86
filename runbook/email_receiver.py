"""The e-mail receiver: each notice (runbook/plain_notices.py) as one plain-text mail through an SMTP
server (python's smtplib), STARTTLS and login as the receiver's settings say. The subject carries the
incident's title; later notices of the same incident reply to it by subject ("Re: ..."), the title kept
in the outbox's state so a restarted watcher still knows it.

A server that is down, a timeout, a 4xx (try later) or a failed login is retried from the outbox; a 5xx
refusal of the message or its recipients will never succeed and parks the notice in outbox/failed/."""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from engine.core.notifier import EmailReceiver
from runbook.outbox_sender import Reject, Retry
from runbook.plain_notices import NoticeReceiver, notice_problem

_TITLE_KEY = "title:"
_MAX_TITLES = 1000


class EmailNotifier(NoticeReceiver):
    def __init__(self, settings: EmailReceiver, outbox_dir: Path, *, username: str | None = None,
                 password: str | None = None, **kwargs: Any) -> None:
        self.label = f"email {settings.name}"
        self._settings, self._username, self._password = settings, username, password
        kwargs.setdefault("close_timeout_s", settings.delivery_timeout_s)
        super().__init__(outbox_dir, notice_problem, join_timeout_s=settings.timeout_s + 1.0, **kwargs)

    def mail(self, message: dict[str, Any]) -> EmailMessage:
        """The mail one notice becomes."""
        s, incident = self._settings, message["incident_id"]
        severity = f" {message['severity']}" if message.get("severity") else ""
        if message["kind"] == "open":
            subject = f"[runbook{severity}] {incident}: {message['title']}"
        elif message["kind"] == "digest":
            subject = f"[runbook] {message['title']}"
        else:
            subject = "Re: " + (self._outbox.state_get(_TITLE_KEY + incident) or f"[runbook] {incident}")
        lines = [message["title"], message["text"], *(f"{k}: {v}" for k, v in message["fields"].items())]
        mail = EmailMessage()
        mail["Subject"] = " ".join(subject.split())[:250]   # one header line, whatever the title contained
        mail["From"], mail["To"] = s.from_addr, ", ".join(s.to)
        mail.set_content("\n".join(line for line in lines if line) + "\n")
        return mail

    def _deliver(self, message: dict[str, Any]) -> None:
        mail, s = self.mail(message), self._settings
        try:
            with smtplib.SMTP(s.host, s.port, timeout=s.timeout_s) as smtp:
                if s.starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if self._username is not None or self._password is not None:
                    smtp.login(self._username or "", self._password or "")
                smtp.send_message(mail)
        except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as error:
            codes = [c for c, _ in error.recipients.values()] if isinstance(error, smtplib.SMTPRecipientsRefused) \
                else [error.smtp_code]
            code = min(codes, default=0)
            if 500 <= code < 600:
                raise Reject(f"SMTP {code}") from None
            raise Retry(f"SMTP {code or type(error).__name__}") from None
        except (smtplib.SMTPException, OSError) as error:   # down, timed out, login refused: until fixed
            raise Retry(type(error).__name__) from None
        if message["kind"] == "open":
            self._outbox.state_set(_TITLE_KEY + message["incident_id"], str(mail["Subject"]), max_keys=_MAX_TITLES)
