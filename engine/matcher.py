"""Pure matching: (snapshot, run config, playbooks, memory) -> decision and new memory.

Nothing here touches a process or a file, which is what makes dry-run, explain and replay honest.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from engine.clauses import MatchContext
from engine.playbook import Playbook


@dataclass(frozen=True)
class Streak:
    count: int
    since: float


@dataclass(frozen=True)
class MatchMemory:
    """What persistence needs to remember between observations: consecutive matches per playbook."""

    streaks: dict[str, Streak] = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptHistory:
    """When each playbook fired (epoch seconds); persisted in the journal across watcher restarts."""

    fired: dict[str, tuple[float, ...]] = field(default_factory=dict)
    escalated: frozenset[str] = frozenset()

    def record(self, name: str, when: float) -> "AttemptHistory":
        fired = dict(self.fired)
        fired[name] = self.fired.get(name, ()) + (when,)
        return replace(self, fired=fired)

    def all_fired(self) -> list[float]:
        return sorted(t for times in self.fired.values() for t in times)


@dataclass(frozen=True)
class Decision:
    kind: str                         # "recover", "escalate" (limits exhausted), "wait" (cooldown)
    playbook: Playbook
    reason: str
    matched: tuple[str, ...] = ()     # every playbook whose match held (for the record)
    inhibited: tuple[str, ...] = ()


@dataclass
class MatchOutcome:
    decision: Decision | None
    memory: MatchMemory
    errors: list[str]


def ordered(playbooks: list[Playbook]) -> list[Playbook]:
    return sorted(playbooks, key=lambda p: (-p.priority, p.name))


def limit_verdict(playbook: Playbook, history: AttemptHistory, now: float, max_per_hour: int) -> tuple[str, str]:
    """("ok"|"cooldown"|"exhausted"|"breaker", why)."""
    limits = playbook.limits
    if playbook.name in history.escalated:
        return "exhausted", f"'{playbook.name}' was already escalated for this run"
    recent = [t for t in history.fired.get(playbook.name, ()) if now - t < limits.window]
    if len(recent) >= limits.max_attempts:
        return "exhausted", f"'{playbook.name}' already fired {len(recent)} time(s) within {limits.window:g} s (max_attempts {limits.max_attempts})"
    if recent and limits.cooldown:
        wait = limits.cooldown * limits.backoff ** (len(recent) - 1)
        if now - recent[-1] < wait:
            return "cooldown", f"cooldown: {wait - (now - recent[-1]):.1f} s left"
    last_hour = [t for t in history.all_fired() if now - t < 3600]
    if len(last_hour) >= max_per_hour:
        return "breaker", f"circuit breaker: {len(last_hour)} recoveries in the last hour (max {max_per_hour})"
    return "ok", ""


def decide(state, config, playbooks: list[Playbook], memory: MatchMemory, history: AttemptHistory) -> MatchOutcome:
    ctx = MatchContext(state=state, config=config)
    now = state.time
    streaks: dict[str, Streak] = {}
    matched: list[Playbook] = []
    for playbook in ordered(playbooks):
        if playbook.match.check(ctx):
            previous = memory.streaks.get(playbook.name)
            streaks[playbook.name] = Streak(previous.count + 1, previous.since) if previous else Streak(1, now)
            matched.append(playbook)
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
    verdict, why = limit_verdict(chosen, history, now, config.watch.max_recoveries_per_hour)
    kind = {"ok": "recover", "cooldown": "wait", "exhausted": "escalate", "breaker": "escalate"}[verdict]
    reason = why or f"'{chosen.name}' matched"
    decision = Decision(kind, chosen, reason, tuple(p.name for p in matched), tuple(sorted(inhibited & {p.name for p in matched})))
    if kind != "wait":
        # A fired playbook starts counting afresh: one incident per distinct failure.
        new_memory = MatchMemory({k: v for k, v in streaks.items() if k != chosen.name})
    return MatchOutcome(decision, new_memory, ctx.errors)
