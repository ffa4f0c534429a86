"""Replay: re-decide a recorded incident against today's playbooks, and say what would differ.

Pure: (record, playbooks, run config, earlier records) -> ReplayResult. Nothing here runs a
command, signals a process or touches a file; a record is data, whatever it says.

Two choices make a single recorded snapshot re-decidable:

* Persistence. A record holds only the snapshot that fired, not the observations before it. Replay
  assumes that every playbook matching that snapshot had matched for as long as its `for:` asks
  (observations and seconds); otherwise `for: {observations: 3}` could never fire from one snapshot.
  The assumption is printed as a note whenever the playbook chosen now needs it.
* Attempt limits. The AttemptHistory is rebuilt from the run's earlier records the way the journal
  rebuilds it: each earlier `recover` decision counts as a firing at its `opened_at`, and each
  earlier escalated incident marks its playbook as escalated. So an incident that was escalated
  because `max_attempts` ran out replays as an escalation, not as a fresh recovery.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from pydantic import ValidationError

from engine.language import ladder
from engine.language.matcher import AttemptHistory, MatchMemory, Streak, decide
from engine.language.planner import plan
from engine.language.playbook import Playbook, unclaimed_failure_playbook
from engine.core.state import StateSnapshot

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.language.planner import PlannedStep

_EPSILON_S = 1e-3                 # float slack so "matched for exactly `seconds`" is not lost to rounding

# verdict -> does it count as a changed decision (exit 1)?
VERDICTS = {
    "unchanged": False,
    "edited": False,               # the playbook's file changed, the decision and actions did not
    "different-actions": True,
    "different-decision": True,    # same playbook, but e.g. recover -> escalate or wait
    "different-playbook": True,
    "no-longer-matches": True,
}


class RecordError(ValueError):
    """The record lacks what a replay needs (or holds it in a shape this version cannot read)."""


@dataclass(frozen=True)
class PlannedAction:
    verb: str
    description: str
    params: str = ""               # canonical JSON: what is compared (descriptions are wording)
    note: str | None = None        # skipped (guard false) or could not be planned

    @property
    def key(self) -> tuple:
        return (self.verb, self.params, self.note is not None)

    def line(self) -> str:
        return f"{self.verb}: {self.description}" + (f" [{self.note}]" if self.note else "")


@dataclass(frozen=True)
class Verdict:
    """One side of the comparison: what was (or would be) decided and planned."""

    kind: str | None               # "recover" | "escalate" | "wait" | None (nothing fires)
    playbook: str | None
    playbook_hash: str | None
    reason: str
    actions: tuple[PlannedAction, ...] = ()
    attempt: int = 1

    @property
    def rung(self) -> str | None:
        """The divergence ladder's rung of this plan (engine/language/ladder.py), or None."""
        return ladder.rung((a.verb for a in self.actions if a.note is None), self.attempt)

    def headline(self) -> str:
        if self.kind is None:
            return f"nothing fires ({self.reason})"
        return f"{self.kind} by '{self.playbook}' ({self.reason})"


@dataclass(frozen=True)
class ReplayResult:
    incident_id: str
    verdict: str                   # a key of VERDICTS
    then: Verdict
    now: Verdict
    notes: tuple[str, ...] = ()    # assumptions and caveats of this replay
    diff: tuple[str, ...] = ()     # "  same", "- then only", "+ now only" action lines

    @property
    def changed(self) -> bool:
        return VERDICTS[self.verdict]

    def summary(self) -> str:
        then, now = self.then, self.now
        return {
            "unchanged": f"unchanged: '{now.playbook}' would {now.kind} with the same actions",
            "edited": f"unchanged decision: '{now.playbook}' was edited since ({then.playbook_hash} -> "
                      f"{now.playbook_hash}) but would {now.kind} with the same actions",
            "different-actions": f"CHANGED: '{now.playbook}' would now plan different actions",
            "different-decision": f"CHANGED: '{now.playbook}' would now {now.kind} (then: {then.kind})",
            "different-playbook": f"CHANGED: '{now.playbook}' would fire now (then: '{then.playbook}')",
            "no-longer-matches": f"CHANGED: no playbook would fire now (then: '{then.playbook}')",
        }[self.verdict]

    def render(self) -> str:
        lines = [f"{self.incident_id}: {self.summary()}",
                 f"  then: {self.then.headline()}", f"  now:  {self.now.headline()}"]
        if self.then.rung or self.now.rung:
            same = self.then.rung == self.now.rung
            lines.append(f"  rung: {self.now.rung or 'none'}" if same else
                         f"  rung: then {self.then.rung or 'none'}; now {self.now.rung or 'none'}")
        if self.diff:
            differs = any(d[:1] in "-+" for d in self.diff)
            lines.append("  actions (- then only, + now only):" if differs else "  actions:")
            lines += [f"    {d}" for d in self.diff]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        def side(v: Verdict) -> dict:
            return {"decision": v.kind, "playbook": v.playbook, "playbook_hash": v.playbook_hash,
                    "reason": v.reason, "actions": [a.line() for a in v.actions], "attempt": v.attempt, "rung": v.rung}

        return {"id": self.incident_id, "verdict": self.verdict, "changed": self.changed,
                "summary": self.summary(), "then": side(self.then), "now": side(self.now),
                "diff": list(self.diff), "notes": list(self.notes)}


# --- building blocks ----------------------------------------------------------------------------
def snapshot_of(record: dict) -> StateSnapshot:
    raw = record.get("snapshot")
    if not isinstance(raw, dict):
        raise RecordError(f"{record.get('id', 'the record')} has no state snapshot to replay")
    try:
        return StateSnapshot.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]).encode("unicode_escape").decode("ascii")[:200]   # one line
        raise RecordError(f"{record.get('id', 'the record')}: snapshot.{where}: {first['msg']}") from None


def recorded_config(record: dict, today: RunConfig) -> tuple[RunConfig, str | None]:
    """The run config the incident saw (config_before), validated as today's RunConfig type.

    Matching and planning read the config (hang_timeout_s, `{{ config.lr / 2 }}`): replaying against
    today's file would report every incident that changed a hyperparameter as "changed". Falls back
    to `today` (with a note) when the record has none or it no longer validates.
    """
    raw = record.get("config_before")
    if not isinstance(raw, dict):
        return today, "the record holds no config_before; matched against today's run config"
    try:
        return type(today).model_validate(raw), None
    except ValidationError as err:
        return today, f"the recorded config_before no longer validates ({err.errors()[0]['msg']}); matched against today's run config"


def history_before(record: dict, earlier: Iterable[dict]) -> AttemptHistory:
    """The attempt history as the supervisor had it when `record` opened (see module docstring)."""
    opened = _number(record.get("opened_at"), _number((record.get("snapshot") or {}).get("time"), float("inf")))
    history = AttemptHistory()
    escalated: set[str] = set()
    past = [r for r in earlier if isinstance(r, dict) and r.get("id") != record.get("id")
            and _number(r.get("opened_at"), float("inf")) < opened]
    for other in sorted(past, key=lambda r: r["opened_at"]):
        name = other.get("playbook")
        if not isinstance(name, str):
            continue
        if other.get("decision") == "recover":
            metrics = (other.get("snapshot") or {}).get("metrics") or {}
            step = metrics.get("step") if isinstance(metrics, dict) else None
            history = history.record(name, float(other["opened_at"]), step if isinstance(step, int) else None)
        if other.get("outcome") == "escalated" and _number(other.get("closed_at"), float("inf")) <= opened:
            escalated.add(name)
    return AttemptHistory(history.fired, frozenset(escalated), history.recoveries)


def persisted_memory(playbooks: list[Playbook], now: float) -> MatchMemory:
    """Streaks one short of firing for every playbook with a `for:` (the persistence assumption)."""
    streaks = {
        p.name: Streak(p.persist.observations - 1, now - p.persist.seconds - _EPSILON_S)
        for p in playbooks if p.persist.observations > 1 or p.persist.seconds > 0
    }
    return MatchMemory(streaks)


def _planned(steps: Iterable[PlannedStep]) -> tuple[PlannedAction, ...]:
    return tuple(PlannedAction(s.verb, s.description, _canonical(s.to_dict().get("params")), s.skipped or s.error)
                 for s in steps)


def _recorded_actions(record: dict) -> tuple[PlannedAction, ...]:
    out = []
    for step in record.get("plan") or []:
        if not isinstance(step, dict) or not isinstance(step.get("verb"), str):
            raise RecordError(f"{record.get('id', 'the record')}: 'plan' holds an entry without a verb")
        out.append(PlannedAction(step["verb"], str(step.get("description", "")), _canonical(step.get("params")),
                                 step.get("skipped") or step.get("error")))
    return tuple(out)


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _number(value: object, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


# --- the replay ---------------------------------------------------------------------------------
def replay(record: dict, playbooks: list[Playbook], config: RunConfig, earlier: Iterable[dict] = ()) -> ReplayResult:
    """Re-decide `record` with `playbooks` under `config` (pass recorded_config(...)'s result to
    replay faithfully). `earlier`: the run's other records, for the attempt history."""
    incident_id = str(record.get("id", "?"))
    if not isinstance(record.get("playbook"), str):
        raise RecordError(f"{incident_id}: the record names no playbook")
    snapshot = snapshot_of(record)
    then = Verdict(record.get("decision") if isinstance(record.get("decision"), str) else None,
                   record["playbook"], record.get("playbook_hash"), str(record.get("decision_reason", "")),
                   _recorded_actions(record), int(_number(record.get("attempt"), 1)))

    history = history_before(record, earlier)
    matched = decide(snapshot, config, playbooks, persisted_memory(playbooks, snapshot.time), history)
    notes = [f"expression error while matching: {e}" for e in matched.errors]
    decision = matched.decision
    if decision is not None:
        chosen = decision.playbook
        # `attempt` as the supervisor counts it: earlier firings within the limits window, plus this one.
        opened = _number(record.get("opened_at"), snapshot.time)
        attempt = 1 + sum(1 for t in history.fired.get(chosen.name, ()) if opened - t < chosen.limits.window)
        now = Verdict(decision.kind, chosen.name, chosen.content_hash, decision.reason,
                      _planned(plan(chosen, snapshot, config, attempt)), attempt)
        if chosen.persist.observations > 1 or chosen.persist.seconds > 0:
            notes.append(f"assumed '{chosen.name}' matched for its whole `for:` ({chosen.persist.observations} "
                         f"observation(s), {chosen.persist.seconds:g} s); the record holds only the snapshot that fired")
    elif not snapshot.trainer.alive:
        fallback = unclaimed_failure_playbook()
        reason = f"trainer exited with {snapshot.trainer.exit_code} and no playbook matched"
        now = Verdict("escalate", fallback.name, None, reason, _planned(plan(fallback, snapshot, config)))
    else:
        now = Verdict(None, None, None, "no playbook matches the recorded state")
    if decision is not None and decision.kind == "wait":
        notes.append("the rebuilt attempt history puts this playbook in its cooldown")

    verdict = _verdict(then, now)
    diff = _action_diff(then.actions, now.actions) if now.kind is not None else ()
    return ReplayResult(incident_id, verdict, then, now, tuple(notes), diff)


def _verdict(then: Verdict, now: Verdict) -> str:
    if now.kind is None:
        return "no-longer-matches"
    if now.playbook != then.playbook:
        return "different-playbook"
    if now.kind != then.kind:
        return "different-decision"
    if [a.key for a in now.actions] != [a.key for a in then.actions]:
        return "different-actions"
    if now.playbook_hash is not None and now.playbook_hash != then.playbook_hash:   # None: the built-in fallback
        return "edited"
    return "unchanged"


def _action_diff(then: tuple[PlannedAction, ...], now: tuple[PlannedAction, ...]) -> tuple[str, ...]:
    """Numbered action lines; compared by verb, params and skip status, shown with descriptions."""
    matcher = difflib.SequenceMatcher(a=[a.key for a in then], b=[a.key for a in now], autojunk=False)
    out: list[str] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out += [f"  {j + 1}. {now[j].line()}" for j in range(j1, j2)]
            continue
        out += [f"- {i + 1}. {then[i].line()}" for i in range(i1, i2)]
        out += [f"+ {j + 1}. {now[j].line()}" for j in range(j1, j2)]
    return tuple(out)
