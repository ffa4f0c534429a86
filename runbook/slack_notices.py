"""PURE. The Slack notices themselves: what an incident's opened, update and closed notices and a digest
say, as the message dicts the outbox stores and runbook/slack.py delivers, and the check that a stored
message is one the sender can deliver. No I/O, no clock: the caller passes ``queued_at``."""

from __future__ import annotations

from typing import Any

from engine.core.text_safety import for_display

KINDS = ("open", "update", "close", "digest")
FIELDS_PER_SECTION = 10      # Slack's limit
HEADER_LIMIT, FIELD_LIMIT, TEXT_LIMIT = 150, 2000, 3000


def opened_notice(incident_id: str, title: str, summary: str, fields: dict[str, str], queued_at: float) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [_header(f"Incident: {title}")]
    if summary:
        blocks.append(_section(_esc(summary)))
    blocks += _field_sections(fields)
    text = f"Incident {incident_id} opened: {title}" + (f"\n{summary}" if summary else "")
    return _message("open", incident_id, _esc(text), blocks, queued_at)


def update_notice(incident_id: str, text: str, queued_at: float) -> dict[str, Any]:
    return _message("update", incident_id, _esc(text), [_section(_esc(text))], queued_at)


def closed_notice(incident_id: str, outcome: str, summary: str, escalate: bool, mention: str | None,
                  queued_at: float) -> dict[str, Any]:
    """An escalation mentions ``mention`` (if set) and is broadcast to the channel, so that it is not
    buried in the incident's thread."""
    head = f"{':rotating_light: *Escalated*' if escalate else ':white_check_mark: *Closed*'}: {_esc(outcome)}"
    if escalate and mention:
        head = f"{mention} {head}"
    body = head + (f"\n{_esc(summary)}" if summary else "")
    return _message("close", incident_id, body, [_section(body)], queued_at, broadcast=escalate)


def digest_notice(title: str, text: str, fields: dict[str, str], queued_at: float) -> dict[str, Any]:
    """A periodic summary (engine/watch/upkeep.py): a top-level message, in no incident's thread."""
    blocks = [_header(title), _section(_esc(text)), *_field_sections(fields)]
    return _message("digest", "digest", _esc(text), blocks, queued_at)


def message_problem(message: object) -> str | None:
    """Why ``message`` cannot be a notice the sender delivers (its fields as the functions above write
    them), or None. A hand-edited `{}` used to raise KeyError 'text' in the sender at every attempt and
    hold every notice queued behind it."""
    if not isinstance(message, dict):
        return f"not a JSON object but {type(message).__name__}"
    if message.get("kind") not in KINDS:
        return f"'kind' is {_short(message.get('kind'))}, not one of {', '.join(KINDS)}"
    for key in ("text", "incident_id"):
        if not isinstance(message.get(key), str):
            return f"'{key}' is {_short(message.get(key))}, not text"
    if not message["text"].strip():
        return "'text' is empty"
    blocks = message.get("blocks")
    if blocks is not None and not (isinstance(blocks, list) and all(isinstance(b, dict) for b in blocks)):
        return f"'blocks' is {_short(blocks)}, not a list of objects"
    if not isinstance(message.get("broadcast", False), bool):
        return f"'broadcast' is {_short(message.get('broadcast'))}, not true or false"
    return None


def _message(kind: str, incident_id: str, text: str, blocks: list[dict[str, Any]], queued_at: float,
             broadcast: bool = False) -> dict[str, Any]:
    if kind != "digest":   # every incident notice names its incident at the bottom
        blocks = blocks + [{"type": "context", "elements": [_mrkdwn(f"incident `{_esc(str(incident_id))}`")]}]
    return {"kind": kind, "incident_id": str(incident_id), "text": _clip(text, TEXT_LIMIT),
            "blocks": blocks, "broadcast": broadcast, "queued_at": queued_at}


def _short(value: object) -> str:
    if value is None:
        return "missing"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _esc(text: str) -> str:
    # Secrets redacted and control characters (bidi overrides too) neutralised before a log line leaves
    # for Slack; then Slack's mrkdwn control characters: log lines love "<" and ">".
    return for_display(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _mrkdwn(text: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": text}


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": _clip(for_display(text), HEADER_LIMIT)}}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(_clip(text, TEXT_LIMIT))}


def _field_sections(fields: dict[str, str]) -> list[dict[str, Any]]:
    items = [_mrkdwn(_clip(f"*{_esc(str(k))}*\n{_esc(str(v))}", FIELD_LIMIT)) for k, v in fields.items()]
    return [{"type": "section", "fields": items[i:i + FIELDS_PER_SECTION]}
            for i in range(0, len(items), FIELDS_PER_SECTION)]
