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

Patterns find a secret by its shape or its name; a value printed on its own (a W&B key) has neither. So
the values runbook itself knows (the secret-named trainer.env and environment variables, the notifiers'
tokens: engine/core/known_secrets.py) are remembered process-wide when a run config loads
(`remember_secrets`) and redacted wherever they appear, reversed or in any case too.

Neutralising writes each dangerous character as a visible escape (`\\x1b`, `\\u202e`), so nothing is
lost and nothing acts. Every pattern is RE2 (linear time: no log line can make these slow).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

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

# Known values: shorter ones only as written (a 4-character value is unlikely and would garble text),
# longer ones also reversed and in any case (a template's `| reverse`, `| lower`).
MIN_KNOWN = 4
MIN_FOLDED = 8
_known: set[str] = set()
_known_pattern: Any = None


def remember_secrets(values: Iterable[object]) -> None:
    """Redact these values (and, from MIN_FOLDED characters, their reversed and case-folded forms) from
    now on, in this process. Values shorter than MIN_KNOWN are ignored."""
    global _known_pattern
    fresh = {v for v in values if isinstance(v, str) and len(v) >= MIN_KNOWN} - _known
    if not fresh:
        return
    _known.update(fresh)
    exact = sorted((v for v in _known if len(v) < MIN_FOLDED), key=len, reverse=True)
    folded = sorted({f for v in _known if len(v) >= MIN_FOLDED for f in (v, v[::-1])}, key=len, reverse=True)
    # Longest first: a value inside another is never left half shown. (?i) only on the long ones.
    parts = [f"(?i:{re2.escape(v)})" for v in folded] + [re2.escape(v) for v in exact]
    _known_pattern = re2.compile("|".join(parts), _OPTIONS)


def forget_secrets() -> None:
    """No known values any more (a test, or a process that loads another project's config)."""
    global _known_pattern
    _known.clear()
    _known_pattern = None


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
    if _known_pattern is not None:
        text = _known_pattern.sub(REDACTED, text)
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


def redact_tree(value: Any, clean: Callable[[str], str] = redact, _depth: int = 0) -> Any:
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


__all__ = ["REDACTED", "for_display", "for_run_log", "forget_secrets", "neutralise", "redact", "redact_tree",
           "remember_secrets", "without_comments"]
