"""Output that works on any terminal: a sane width whatever COLUMNS says, and text that degrades on an
ASCII-only (or other narrow-charset) stdout instead of crashing.

rich takes its width from COLUMNS when that is all digits: COLUMNS=0 made every rich print empty (the
command printed nothing and exited 0), a tiny width broke tables into one character per line. And a
`PYTHONIOENCODING=ascii` stdout raised UnicodeEncodeError at the first arrow or dash. `sane_terminal()`
runs once, when the command line starts and before any Console is made.
"""

from __future__ import annotations

import os
import shutil
import sys

MIN_COLUMNS = 80      # rich's own width for a pipe; narrower cut incident ids in tables to "incid…"
MAX_COLUMNS = 1000    # wider is no use to anyone and costs padding on every line


def clamped_columns(value: str | None, terminal_columns: int | None = None) -> str | None:
    """PURE. The COLUMNS this process should use, or None to leave it as it is. rich reads COLUMNS when
    `str.isdigit()` says so (then `int()` of it, which fails on digits like "²"), else the terminal's
    width; either is kept within [MIN_COLUMNS, MAX_COLUMNS]."""
    if value is not None and value.isdigit():
        try:
            width = int(value)
        except ValueError:   # "²" is a digit to isdigit() but no number to int()
            return str(MIN_COLUMNS if not terminal_columns else min(MAX_COLUMNS, max(MIN_COLUMNS, terminal_columns)))
    elif terminal_columns:
        width = terminal_columns
    else:
        return None
    clamped = min(MAX_COLUMNS, max(MIN_COLUMNS, width))
    unchanged = value == str(width) or not (value or "").isdigit()   # as given, or the terminal's own
    return None if clamped == width and unchanged else str(clamped)


def sane_terminal() -> None:
    """Clamp COLUMNS for this process's consoles and make stdout/stderr replace what their encoding
    cannot show (`?`), keeping whatever else they were given."""
    value = os.environ.get("COLUMNS")
    if value is not None and value.isdigit() and not value.strip("0"):   # 0: no width given; rich's default
        del os.environ["COLUMNS"]
        value = None
    terminal = None
    if value is None or not value.isdigit():
        try:
            terminal = shutil.get_terminal_size((0, 0)).columns if sys.stdout.isatty() else None
        except (OSError, ValueError, AttributeError):
            terminal = None
    fixed = clamped_columns(value, terminal)
    if fixed is not None:
        os.environ["COLUMNS"] = fixed
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                "\u2192\u2026\u2500".encode(stream.encoding or "ascii")
            except (UnicodeEncodeError, LookupError):
                try:
                    stream.reconfigure(errors="replace")
                except (ValueError, OSError):   # already written to in a way that forbids it
                    pass
