"""What every match clause is: a spec model with one observation of the state and one test of it.

`check` (the matcher) is `holds(observe(ctx))`; `explain` (`runbook playbooks explain`) makes the
same two calls and formats them, so an explanation cannot disagree with a decision. The few kinds
that unroll the pair on the matcher's hot path are kept in line with `explain` by tests/language/test_clause_agreement.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Generic, Iterable, Iterator, TypeVar

from pydantic import BaseModel, ConfigDict

from engine.core.exit_codes import effective_exit

if TYPE_CHECKING:
    from engine.core.config import RunConfig
    from engine.core.state import StateSnapshot
    from engine.language.tail_index import TailIndex


@dataclass
class Explanation:
    clause: str
    matched: bool
    expected: str
    actual: str
    children: list["Explanation"] = field(default_factory=list)


@dataclass(slots=True)
class MatchContext:
    """What clauses see: the snapshot, the run config, and what one observation computes once."""

    state: StateSnapshot
    config: RunConfig
    errors: list[str] = field(default_factory=list)
    tail_index: TailIndex | None = None   # of the matcher's playbook set
    expr_results: dict = field(default_factory=dict)   # condition -> (value, error), this observation
    _expr_context: dict | None = None
    _tail_first: dict | None = None
    _exit: tuple | None = None

    def exit_seen(self) -> tuple[int | None, str | None]:
        """The ended trainer's (exit code, signal), normalised once (engine/core/exit_codes.py): a shell's
        137, a wrapped 247 and a launcher's report of its failing rank's signal all read as that signal."""
        if self._exit is None:
            trainer = self.state.trainer
            self._exit = effective_exit(trainer.exit_code, trainer.signal, self.state.tail)
        return self._exit

    def first_tail_lines(self) -> dict:
        if self._tail_first is None:
            assert self.tail_index is not None   # asked only where the matcher gave its index (log.py)
            self._tail_first = self.tail_index.first_lines(self.state.tail)
        return self._tail_first

    @property
    def expr_context(self) -> dict:
        if self._expr_context is None:
            self._expr_context = {"state": self.state, "config": self.config}
        return self._expr_context


Observed = TypeVar("Observed")


class Clause(BaseModel, Generic[Observed]):
    """One kind of match clause, written in YAML as `{<kind>: <spec>}`, typed by what it observes.

    A kind sets `kind`, `doc` (its paragraph in docs/playbooks.md and in the JSON Schema) and
    `example` (the clause in YAML; docs generation validates it), and implements `observe` (what
    the state shows: everything the test needs), `holds` (the test: a pure function of that) and
    `expected` (the test in words).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: ClassVar[str]
    doc: ClassVar[str]
    example: ClassVar[str]

    def observe(self, ctx: MatchContext) -> Observed:
        raise NotImplementedError

    def holds(self, observed: Observed) -> bool:
        raise NotImplementedError

    def expected(self, ctx: MatchContext) -> str:
        raise NotImplementedError

    def check(self, ctx: MatchContext) -> bool:
        return self.holds(self.observe(ctx))

    def explain(self, ctx: MatchContext) -> Explanation:
        observed = self.observe(ctx)
        return Explanation(self.kind, self.holds(observed), self.expected(ctx), self.show(observed))

    def show(self, observed: Observed) -> str:
        return repr(observed)

    def parts(self) -> Iterable[tuple[tuple, "Clause"]]:
        """The clauses directly below this one, each with its YAML location relative to this one."""
        return ()

    def expressions(self) -> Iterable[tuple[tuple, str]]:
        """The expressions this clause itself holds (not those below it), with their YAML locations."""
        return ()


class Combinator(Clause[Iterator[bool]]):
    """A clause over clauses: what it observes is the verdicts of the clauses below it, in order.

    Its `check` may unroll `holds(observe(ctx))` into one loop (the generator costs more than most
    clauses on the matcher's hot path); tests/language/test_clause_agreement.py holds it to `explain`.
    """

    def children(self) -> list[Clause]:
        raise NotImplementedError

    def observe(self, ctx: MatchContext) -> Iterator[bool]:
        return (child.check(ctx) for child in self.children())  # lazy: all/any stop at the deciding one

    def explain(self, ctx: MatchContext) -> Explanation:
        below = [child.explain(ctx) for child in self.children()]
        return Explanation(self.kind, self.holds(e.matched for e in below), self.expected(ctx), "", below)

    def parts(self) -> Iterable[tuple[tuple, Clause]]:
        return (((self.kind, index), child) for index, child in enumerate(self.children()))


def walk(clause: Clause, loc: tuple = ()) -> Iterator[tuple[tuple, Clause]]:
    """The clause and every clause below it, depth first, each with its YAML location."""
    yield loc, clause
    for key, child in clause.parts():
        yield from walk(child, loc + key)

