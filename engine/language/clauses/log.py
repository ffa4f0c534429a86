"""`log`: a log line matches a regular expression (RE2: linear time whatever the pattern)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.language.clauses.base import Clause, MatchContext
from engine.expr.patterns import MAX_LINE, compile_pattern


class LogSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    pattern: str = Field(description="regular expression searched in each line (RE2 syntax: Python's without backreferences and lookaround; matched in linear time)")
    scope: Literal["new", "tail", "since_progress"] = Field(
        "new", description="new: lines since the last observation; tail: recent lines; since_progress: the tail's lines "
                           "after the last progress line (what the trainer printed before going silent)")
    ignore_case: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_pattern(value, False)  # raises ValueError with the reason
        return value


class LogClause(Clause[str | None]):
    kind = "log"
    doc = ("A log line matches a regular expression: `scope: new` searches the lines printed since the last "
           "observation, `scope: tail` the last 200 lines, `scope: since_progress` the last 200 lines' part after "
           "the launch's last progress line (`state.lines_since_progress`; all of them where that is unknown): "
           "what a trainer printed before it went silent, not what it printed and trained on past.")
    example = "log:\n  pattern: 'CUDA out of memory'\n  scope: new"

    log: LogSpec

    @property
    def regex(self) -> re.Pattern:
        return _regex(self.log.pattern, self.log.ignore_case)

    def observe(self, ctx: MatchContext) -> str | None:
        """The first matching line, or None."""
        regex = self.regex
        if self.log.scope == "tail" and ctx.tail_index is not None and regex in ctx.tail_index.position:
            # The matcher's index of the tail: the same first line a scan finds, each line searched once per set.
            return ctx.first_tail_lines().get(regex)
        lines = ctx.state.new_lines if self.log.scope == "new" else ctx.state.tail
        if self.log.scope == "since_progress":
            since = ctx.state.lines_since_progress
            lines = lines if since is None else lines[len(lines) - min(since, len(lines)):]
        return next((line for line in lines if regex.search(line if len(line) <= MAX_LINE else line[:MAX_LINE])), None)

    def holds(self, observed: str | None) -> bool:
        return observed is not None

    def expected(self, ctx: MatchContext) -> str:
        return f"a {self.log.scope} line matching /{self.log.pattern}/"


# Identical patterns in several playbooks share one compiled object, which the tail index relies on.
_REGEX_CACHE: dict[tuple[str, bool], re.Pattern] = {}


def _regex(pattern: str, ignore_case: bool) -> re.Pattern:
    key = (pattern, ignore_case)
    if key not in _REGEX_CACHE:
        _REGEX_CACHE[key] = compile_pattern(pattern, ignore_case)
    return _REGEX_CACHE[key]
