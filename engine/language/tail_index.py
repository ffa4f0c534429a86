"""Tail-scope log clauses, searched once per line instead of once per clause and observation."""

from __future__ import annotations

import re
from typing import Iterable

from engine.language.clauses import Clause, LogClause, walk
from engine.expr.patterns import MAX_LINE


class TailIndex:
    """Which of a playbook set's `scope: tail` patterns each tail line matches, searched once per line.

    The tail is mostly the same 200 lines from one observation to the next, and every tail clause
    would search all of them again; here each line is searched once with every pattern and an
    observation only looks its lines up. Same answers as searching: the first matching line.
    """

    MAX_LINES = 10_000  # remembered lines; cleared beyond that (the tail itself holds 200)

    def __init__(self, patterns: Iterable[re.Pattern]):
        self.patterns = tuple(dict.fromkeys(patterns))
        self.position = {p: i for i, p in enumerate(self.patterns)}
        self.lines: dict[str, tuple[re.Pattern, ...]] = {}

    def first_lines(self, tail: list[str]) -> dict[re.Pattern, str]:
        if len(self.lines) > self.MAX_LINES:
            self.lines.clear()
        first: dict[re.Pattern, str] = {}
        for line in tail:
            hits = self.lines.get(line)
            if hits is None:
                text = line if len(line) <= MAX_LINE else line[:MAX_LINE]
                hits = self.lines[line] = tuple(p for p in self.patterns if p.search(text))
            for pattern in hits:
                first.setdefault(pattern, line)
        return first


def tail_patterns(clauses: Iterable[Clause]) -> list[re.Pattern]:
    return [c.regex for top in clauses for _, c in walk(top) if isinstance(c, LogClause) and c.log.scope == "tail"]
