"""The playbook format: a typed, validated form of the user's YAML (the runtime never sees raw dicts)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from engine.language.clauses import AnyClause
from engine.expr.expressions import compile_expression
from engine.language.types import Duration, parse_duration
from engine.language.actions import REGISTRY, validate_params

class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Persistence(Strict):
    """Fire only after the match kept matching this long (both, when both are given)."""

    observations: int = Field(1, ge=1, le=1_000_000, description="consecutive matching observations")
    seconds: Duration = Field(0.0, ge=0, description="the match kept matching, without a break, for this long")


class Limits(Strict):
    max_attempts: int = Field(3, ge=1, le=1000, description="recoveries allowed within `window`")
    window: Duration = Field(3600.0, gt=0, description="sliding window for max_attempts (duration)")
    cooldown: Duration = Field(0.0, ge=0, description="minimum time between two firings (duration)")
    backoff: float = Field(1.0, ge=1, le=10, allow_inf_nan=False, description="cooldown multiplier for each further attempt in the window (1 to 10)")


class ActionStep(Strict):
    """One verb with its params; `if:` guards it, `on_failure` says what a failure does."""

    verb: str
    params: dict[str, Any] = Field(default_factory=dict)
    condition: str | None = Field(None, alias="if")
    on_failure: Literal["continue", "abort", "escalate"] = "abort"

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "verb" in data:
            return data
        verbs = [k for k in data if k not in ("if", "on_failure")]
        if len(verbs) != 1:
            raise ValueError(f"an action is one verb with optional 'if' and 'on_failure'; got keys {sorted(map(str, data))}")
        verb = verbs[0]
        params = data[verb]
        out = {"verb": verb, "params": {} if params is None else params}
        for key in ("if", "on_failure"):
            if key in data:
                out[key] = data[key]
        return out

    @model_validator(mode="after")
    def _valid_for_verb(self) -> "ActionStep":
        if self.verb not in REGISTRY:
            raise ValueError(f"unknown action '{self.verb}'; known: {', '.join(sorted(REGISTRY))}")
        if not isinstance(self.params, dict):
            raise ValueError(f"{self.verb}: params must be a mapping")
        validate_params(self.verb, self.params)
        if self.condition is not None:
            compile_expression(self.condition)
        return self


class PlaybookTest(Strict):
    """A recorded or written series of observations and the decision the playbook must make."""

    name: str
    observations: list[dict[str, Any]] = Field(min_length=1, description="partial snapshots, applied in order")
    config: dict[str, Any] = Field(default_factory=dict, description="run-config overrides for this test")
    expect_fires_at: int | None = Field(description="1-based observation that fires, or null for never")
    expect_actions: list[str] | None = Field(None, description="verbs planned when it fires (guards applied)")


class Playbook(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    description: str
    severity: Literal["info", "warning", "critical"] = "warning"
    priority: int = Field(50, ge=-1_000_000, le=1_000_000, description="higher wins when several playbooks match the same state")
    lesson: str = Field("", description="one line written into docs/run-log.md with each incident")
    inhibits: list[str] = Field(default_factory=list, description="playbooks silenced while this one matches")
    # acts_on: `evidence:` before, still read (that word now names only the snapshot's machine facts, `state.evidence`).
    acts_on: list[str] = Field(default_factory=list, max_length=20, validation_alias=AliasChoices("acts_on", "evidence"), description="what must be seen before this playbook acts, in words, one item per piece (every shipped playbook that relaunches the trainer states it; `runbook triage` names the pieces a log could not show; `evidence:`, its old name, is still read)")
    counts_toward_breaker: bool = Field(True, description="false for upkeep-like playbooks (pruning) that must not trip the global circuit breaker")
    match: AnyClause
    persist: Persistence = Field(default_factory=Persistence, alias="for")
    limits: Limits = Field(default_factory=Limits)
    actions: list[ActionStep] = Field(min_length=1)
    tests: list[PlaybookTest] = Field(default_factory=list)

    @model_validator(mode="after")
    def _not_self_inhibiting(self) -> "Playbook":
        if self.name in self.inhibits:
            raise ValueError(f"inhibits: '{self.name}' cannot inhibit itself (it would never fire)")
        return self

    _source: Path | None = PrivateAttr(None)
    _line: int = PrivateAttr(1)            # the line of the file where the playbook's mapping starts
    _content_hash: str = PrivateAttr("")

    @property
    def source(self) -> str:
        return f"{self._source}:{self._line}" if self._source else "<memory>"

    @property
    def source_file(self) -> Path | None:
        return self._source

    @property
    def content_hash(self) -> str:
        return self._content_hash


def content_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def build_playbook(data: dict, source: Path | None = None, line: int = 1, text: str = "") -> Playbook:
    """Validate one playbook mapping (raises pydantic ValidationError)."""
    playbook = Playbook.model_validate(data)
    playbook._source = source
    playbook._line = line
    playbook._content_hash = content_hash(text or repr(data))
    return playbook


__all__ = ["Playbook", "ActionStep", "Limits", "Persistence", "PlaybookTest", "build_playbook", "parse_duration", "ValidationError"]


# Escalated when a dead trainer matches no playbook (the watcher and `runbook replay` share it).
FALLBACK_PLAYBOOK = {
    "name": "unclaimed-failure",
    "description": "the trainer exited and no playbook matched",
    "severity": "critical",
    "lesson": "Write a playbook for this failure: `runbook replay` the incident after adding it.",
    "match": {"exit": {"nonzero": True}},
    "actions": [{"escalate": {"reason": "no playbook matched this failure"}}],
}


def unclaimed_failure_playbook(exit_code: int | None = None) -> Playbook:
    described = {**FALLBACK_PLAYBOOK}
    if exit_code is not None:
        described["description"] = f"the trainer exited (code {exit_code}) and no playbook matched"
    return build_playbook(described)
