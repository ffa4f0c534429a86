"""When each playbook fired: the attempt history behind limits and escalation, kept in the journal."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class AttemptHistory:
    """When each playbook fired (epoch seconds); persisted in the journal across watcher restarts."""

    fired: dict[str, tuple[float, ...]] = field(default_factory=dict)
    escalated: frozenset[str] = frozenset()
    # every recovery in order: (playbook, epoch seconds, the step the run had reached then; None: unknown)
    recoveries: tuple[tuple[str, float, int | None], ...] = ()

    def record(self, name: str, when: float, step: int | None = None) -> "AttemptHistory":
        fired = dict(self.fired)
        fired[name] = self.fired.get(name, ()) + (when,)
        return replace(self, fired=fired, recoveries=self.recoveries + ((name, when, step),))

    def all_fired(self, exclude: frozenset[str] = frozenset()) -> list[float]:
        return sorted(t for name, times in self.fired.items() if name not in exclude for t in times)
