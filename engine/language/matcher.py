"""Pure matching: (snapshot, run config, playbooks, memory) -> decision and new memory.

Nothing here touches a process or a file, which is what makes dry-run, explain and replay honest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.language.clauses import MatchContext
from engine.language.clauses.all_of import AllClause
from engine.language.clauses.exit import ExitClause
from engine.records.attempts import AttemptHistory  # noqa: F401 - decide() reads it; kept importable here
from engine.language.playbook import Playbook
from engine.language.restart_storm import restart_storm
from engine.language.tail_index import TailIndex, tail_patterns

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.core.state import StateSnapshot
    from engine.language.clauses import Clause


@dataclass(frozen=True)
class Streak:
    count: int
    since: float


@dataclass(frozen=True)
class MatchMemory:
    """What persistence needs to remember between observations: consecutive matches per playbook."""

    streaks: dict[str, Streak] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    kind: str                         # "recover", "escalate" (limits exhausted), "wait" (cooldown)
    playbook: Playbook
    reason: str
    matched: tuple[str, ...] = ()     # every playbook whose match matched (for the record)
    inhibited: tuple[str, ...] = ()


@dataclass
class MatchOutcome:
    decision: Decision | None
    memory: MatchMemory
    errors: list[str]


def ordered(playbooks: list[Playbook]) -> list[Playbook]:
    """By priority (highest first), then name."""
    return list(_prepared(playbooks)[0])


def _prepared(playbooks: list[Playbook]) -> tuple[tuple[Playbook, ...], TailIndex]:
    """The set in matching order, and its tail-line index; made once per playbook set.

    The watcher passes the same list at every observation: sort it once, not 50,000 times a second.
    """
    key = tuple(map(id, playbooks))
    cached = _PREPARED.get(key)
    if cached is None:
        if len(_PREPARED) >= 16:
            _PREPARED.clear()
        in_order = tuple(sorted(playbooks, key=lambda p: (-p.priority, p.name)))
        index = TailIndex(tail_patterns(p.match for p in in_order))
        # The entry keeps the playbooks alive, so their ids cannot be reused by other objects.
        cached = _PREPARED[key] = (tuple(playbooks), in_order, index)
    return cached[1], cached[2]


_PREPARED: dict[tuple[int, ...], tuple[tuple[Playbook, ...], tuple[Playbook, ...], TailIndex]] = {}


_EMPTY_MEMORY = MatchMemory()


def limit_verdict(playbook: Playbook, history: AttemptHistory, now: float, max_per_hour: int,
                  not_counted: frozenset[str] = frozenset()) -> tuple[str, str]:
    """("ok"|"cooldown"|"exhausted"|"breaker", why)."""
    limits = playbook.limits
    if playbook.name in history.escalated:
        return "exhausted", f"'{playbook.name}' was already escalated for this run"
    recent = [t for t in history.fired.get(playbook.name, ()) if now - t < limits.window]
    if len(recent) >= limits.max_attempts:
        return "exhausted", f"'{playbook.name}' already fired {len(recent)} time(s) within {limits.window:g} s (max_attempts {limits.max_attempts})"
    if recent and limits.cooldown:
        wait = limits.cooldown * limits.backoff ** min(len(recent) - 1, 300)  # 10**300 is still a float
        if now - recent[-1] < wait:
            return "cooldown", f"cooldown: {wait - (now - recent[-1]):.1f} s left"
    last_hour = [t for t in history.all_fired(exclude=not_counted) if now - t < 3600]
    if playbook.counts_toward_breaker and len(last_hour) >= max_per_hour:
        return "breaker", f"circuit breaker: {len(last_hour)} recoveries in the last hour (max {max_per_hour})"
    return "ok", ""


def judging_completion(playbooks: list[Playbook]) -> list[Playbook]:
    """PURE. The playbooks that judge a trainer which exited 0 with its final checkpoint saved: those whose match
    requires exit code 0 (the whole match, or a member of its top-level `all`). A completed run is judged by these
    alone; the others judge a running or failed trainer (a spike playbook must not roll back a finished run, and
    a log line in a finished run's tail must not relaunch it)."""
    def names_exit_zero(clause: Clause) -> bool:
        return isinstance(clause, ExitClause) and 0 in clause.exit.codes

    return [p for p in playbooks if names_exit_zero(p.match)
            or (isinstance(p.match, AllClause) and any(names_exit_zero(c) for c in p.match.all))]


def decide(state: StateSnapshot, config: RunConfig, playbooks: list[Playbook], memory: MatchMemory, history: AttemptHistory) -> MatchOutcome:
    in_order, tail_index = _prepared(playbooks)
    ctx = MatchContext(state=state, config=config, tail_index=tail_index)
    now = state.time
    streaks: dict[str, Streak] = {}
    matched: list[Playbook] = []
    for playbook in in_order:
        if playbook.match.check(ctx):
            previous = memory.streaks.get(playbook.name)
            streaks[playbook.name] = Streak(previous.count + 1, previous.since) if previous else Streak(1, now)
            matched.append(playbook)
    if not matched:  # the healthy case, nearly every observation: nothing new to allocate
        return MatchOutcome(None, memory if not memory.streaks else _EMPTY_MEMORY, ctx.errors)
    new_memory = MatchMemory(streaks)
    inhibited = {target for p in matched for target in p.inhibits}
    ready = [
        p for p in matched
        if p.name not in inhibited
        and streaks[p.name].count >= p.persist.observations
        and now - streaks[p.name].since >= p.persist.seconds
    ]
    if not ready:
        return MatchOutcome(None, new_memory, ctx.errors)
    chosen = ready[0]
    not_counted = frozenset(p.name for p in playbooks if not p.counts_toward_breaker)
    verdict, why = limit_verdict(chosen, history, now, config.watch.max_recoveries_per_hour, not_counted)
    if verdict == "ok" and chosen.counts_toward_breaker:
        # A divergence ladder (rollback, lower lr, again) resumes below its failure by design: not a storm's links.
        rolls_back = frozenset(p.name for p in playbooks if any(step.verb == "rollback" for step in p.actions))
        storm = None if chosen.name in rolls_back else restart_storm(
            history.recoveries, chosen.name, state.metrics.step, config.watch.restart_storm_incidents,
            not_counted | rolls_back)
        if storm is not None:
            verdict, why = "storm", storm.reason(now)
    kind = {"ok": "recover", "cooldown": "wait", "exhausted": "escalate", "breaker": "escalate", "storm": "escalate"}[verdict]
    reason = why or f"'{chosen.name}' matched"
    decision = Decision(kind, chosen, reason, tuple(p.name for p in matched), tuple(sorted(inhibited & {p.name for p in matched})))
    if kind != "wait":
        # A fired playbook starts counting afresh: one incident per distinct failure.
        new_memory = MatchMemory({k: v for k, v in streaks.items() if k != chosen.name})
    return MatchOutcome(decision, new_memory, ctx.errors)


def attempt_number(history: AttemptHistory, playbook: Playbook, now: float) -> int:
    """PURE. 1 for the first firing within the playbook's limits window, 2 for the next..."""
    earlier = [t for t in history.fired.get(playbook.name, ()) if now - t < playbook.limits.window]
    return len(earlier) + 1

