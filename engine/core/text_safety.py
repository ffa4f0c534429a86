"""PURE. Text from a trainer's log (or any command's output) made safe before it is shown or kept.

A log line is the trainer's, or anything the trainer printed: a terminal escape that clears the screen
or retitles the window, a bidi override that reorders what a person reads, a forged run-log marker, a
token. Three functions, one concern each, used where text leaves runbook:

- `for_display`: secrets redacted, control characters neutralised (terminal output: incidents show,
  ledger, slurm submit --dry-run, the watch console lines);
- `for_run_log`: the same, and nothing that opens or closes an HTML comment (a forged
  `<!-- runbook:incident-N -->` marker would suppress that incident's entry; an opened comment would
  hide every later entry in the rendered page);
- `redact` / `redact_tree`: secrets only (records, Slack notices), everything else kept as it was.

Neutralising writes each dangerous character as a visible escape (`\\x1b`, `\\u202e`), so nothing is
lost and nothing acts. Every pattern is RE2 (linear time: no log line can make these slow).
"""

from __future__ import annotations

import re
from typing import Any

import re2

REDACTED = "[REDACTED]"

# C0 controls but \t and \n, DEL, C1 controls (0x9b is a one-byte CSI), bidi embeddings/overrides/isolates
# and marks, line/paragraph separators, and lone surrogates (from undecodable bytes; unprintable).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
                      "\ud800-\udfff]")
_CONTROL_OR_NEWLINE = re.compile("\n|" + _CONTROL.pattern)
# `<!` opens an HTML comment (or a declaration); `-->` closes one. Escaped with a backslash, which Markdown
# shows as the character itself and HTML never reads as a comment.
_COMMENT = re.compile(r"<!|--!?>")

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_CASELESS = re2.Options()
_CASELESS.log_errors = False
_CASELESS.case_sensitive = False

_KEY_BEGIN = r"-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY-----"
_KEY_END = r"-----END (?:[A-Z0-9]+ ){0,3}PRIVATE KEY-----"
_SECRET_WORDS = (r"(?:token|password|passwd|passphrase|secret|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
                 r"|client[_-]?secret|auth[_-]?token)")
# (pattern, replacement, caseless). A replacement keeps the name of what was hidden (\1), never the value.
_RULES = [
    (rf"{_KEY_BEGIN}(?:[\s\S]*?{_KEY_END}|[\s\S]*)", "[REDACTED PRIVATE KEY]", False),   # unterminated: to the end
    (r"\b(?:xox[abposrce]|xapp)-[A-Za-z0-9-]{8,500}", REDACTED, False),                  # Slack
    (r"\bhf_[A-Za-z0-9]{20,200}", REDACTED, False),                                      # Hugging Face
    (r"\bgh[pousr]_[A-Za-z0-9]{20,255}", REDACTED, False),                               # GitHub
    (r"\bgithub_pat_[A-Za-z0-9_]{20,255}", REDACTED, False),
    (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", REDACTED, False),                                 # AWS access key id
    (r"(\bauthorization[\"']?\s{0,5}[:=]\s{0,5}[\"']?(?:(?:bearer|basic|token)\s{1,5})?)[^\s\"',;]{1,1000}",
     r"\1" + REDACTED, True),
    (r"(\bbearer\s{1,5})[A-Za-z0-9._~+/=-]{8,1000}", r"\1" + REDACTED, True),
    # name=value, name: value, "name": "value", SLACK_BOT_TOKEN=..., --api-key=...; not max_tokens: 8
    (rf"((?:\b|_)(?:[a-z0-9_.-]{{0,40}}[_.-])?{_SECRET_WORDS}[\"']?\s{{0,5}}[=:]\s{{0,5}}[\"']?)[^\s\"',;&]{{1,1000}}",
     r"\1" + REDACTED, True),
]
_COMPILED = [(re2.compile(p, _CASELESS if caseless else _OPTIONS), repl) for p, repl, caseless in _RULES]
# One pass that every rule's match implies: most text holds none of these, and is then left after one scan.
_TRIGGER = re2.compile(r"PRIVATE KEY|xox[a-z]-|xapp-|hf_|gh[pousr]_|github_pat_|AKIA|ASIA|authorization|bearer|"
                       + _SECRET_WORDS, _CASELESS)
_BEGIN_ONLY = re2.compile(_KEY_BEGIN, _OPTIONS)
_END_ONLY = re2.compile(_KEY_END, _OPTIONS)
_MAX_DEPTH = 64


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def neutralise(text: str, keep_newlines: bool = True) -> str:
    """Every control character that can act on a terminal or reorder text, written as a visible escape;
    \\n (unless keep_newlines is False) and \\t are kept."""
    return (_CONTROL if keep_newlines else _CONTROL_OR_NEWLINE).sub(_escape, str(text))


def redact(text: str) -> str:
    """`text` with every secret it holds replaced by [REDACTED] (the name before a `name=value` is kept)."""
    text = str(text)
    if not _TRIGGER.search(text):
        return text
    for pattern, replacement in _COMPILED:
        text = pattern.sub(replacement, text)
    return text


def without_comments(text: str) -> str:
    """Nothing in `text` can open or close an HTML/Markdown comment: `<!` -> `<\\!`, `-->` -> `--\\>`."""
    return _COMMENT.sub(lambda m: m.group()[:-1] + "\\" + m.group()[-1], str(text))


def for_display(text: Any) -> str:
    return neutralise(redact(str(text)))


def for_run_log(text: Any) -> str:
    return without_comments(neutralise(redact(str(text))))


def redact_tree(value: Any, clean=redact, _depth: int = 0) -> Any:
    """A copy of a JSON-like value with `clean` applied to every string (keys included); a private key
    spread over the items of a list (a log tail, one line per item) is redacted item by item."""
    if isinstance(value, str):
        return clean(value)
    if _depth > _MAX_DEPTH:   # deeper than any record runbook writes: kept whole, as one cleaned text
        return clean(repr(value))
    if isinstance(value, dict):
        return {clean(k) if isinstance(k, str) else k: redact_tree(v, clean, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out, in_key = [], False
        for item in value:
            if isinstance(item, str):
                if in_key:
                    in_key = not _END_ONLY.search(item)
                    out.append("[REDACTED PRIVATE KEY]")
                    continue
                in_key = bool(_BEGIN_ONLY.search(item)) and not _END_ONLY.search(item)
            out.append(redact_tree(item, clean, _depth + 1))
        return out
    return value


__all__ = ["REDACTED", "for_display", "for_run_log", "neutralise", "redact", "redact_tree", "without_comments"]
