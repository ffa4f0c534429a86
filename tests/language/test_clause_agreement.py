"""`check` (what the matcher decides) and `explain` (what `runbook playbooks explain` shows) agree.

Both go through a clause's one `observe`/`holds` pair, and a few kinds unroll that pair on the hot
path (exit, all, any, not) or read a shared index (log, scope tail): every clause of every kind is
held to its explanation on a corpus of real snapshots, with and without the matcher's tail index.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.language.clauses import CLAUSE_TYPES, AnyClause, Clause, MatchContext, walk
from engine.language.loader import load_playbooks
from engine.language.playbook_testing import build_config, build_snapshots
from engine.language.tail_index import TailIndex, tail_patterns
from pydantic import TypeAdapter
from ruamel.yaml import YAML
from runbook.playbook_lint import SAMPLES
from tests.language.test_playbook_language import CLAUSE_CASES, snap

REPO = Path(__file__).resolve().parents[2]
SHIPPED = load_playbooks([REPO / "playbooks"])
_CLAUSE = TypeAdapter(AnyClause)


def _corpus() -> list[tuple[str, object, object]]:
    """(name, snapshot, run config): the shipped playbooks' test observations, lint's sample states,
    and the hit and miss states of each clause case of the language tests."""
    corpus = []
    for playbook in SHIPPED:
        for test in playbook.tests:
            config = build_config(test.config)
            for number, state in enumerate(build_snapshots(test.observations, config), start=1):
                corpus.append((f"{playbook.name}/{test.name}/{number}", state, config))
    default = build_config({})
    corpus += [(f"lint sample: {name}", state, default) for name, state in SAMPLES.items()]
    for name, _, hit, miss in CLAUSE_CASES:
        corpus += [(f"{name}: hit", snap(hit), default), (f"{name}: miss", snap(miss), default)]
    return corpus


def _clauses() -> list[Clause]:
    """Every clause (at every depth) of the shipped playbooks, the clause cases and each kind's example."""
    tops = [p.match for p in SHIPPED]
    tops += [_CLAUSE.validate_python(clause) for _, clause, _, _ in CLAUSE_CASES]
    tops += [_CLAUSE.validate_python(YAML(typ="safe", pure=True).load(kind.example)) for kind in CLAUSE_TYPES.values()]
    return list({id(c): c for top in tops for _, c in walk(top)}.values())


CORPUS = _corpus()
CLAUSES = _clauses()
INDEX = TailIndex(tail_patterns(CLAUSES))


def test_the_corpus_has_every_kind_matching_and_not_matching():
    """Otherwise the agreement below could hold by never being tested on one side."""
    seen: dict[str, set[bool]] = {kind: set() for kind in CLAUSE_TYPES}
    for clause in CLAUSES:
        for _, state, config in CORPUS:
            seen[clause.kind].add(clause.check(MatchContext(state=state, config=config)))
    assert seen == {kind: {True, False} for kind in CLAUSE_TYPES}


@pytest.mark.parametrize("kind", list(CLAUSE_TYPES))
def test_check_agrees_with_explain(kind: str):
    clauses = [c for c in CLAUSES if c.kind == kind]
    assert clauses, f"no clause of kind '{kind}' in the corpus"
    for clause in clauses:
        for name, state, config in CORPUS:
            verdicts = {
                "check": clause.check(MatchContext(state=state, config=config)),
                "check with the tail index": clause.check(MatchContext(state=state, config=config, tail_index=INDEX)),
                "explain": clause.explain(MatchContext(state=state, config=config)).matched,
                "explain with the tail index": clause.explain(MatchContext(state=state, config=config, tail_index=INDEX)).matched,
            }
            assert len(set(verdicts.values())) == 1, f"{kind} clause {clause!r} on {name}: {verdicts}"


def test_explain_shows_what_was_observed():
    """The explanation's `actual` is the observation check tested, not a second reading of the state."""
    state = snap({"trainer": {"alive": True}, "seconds_since_progress": 61.5})
    stalled = _CLAUSE.validate_python({"stalled": {"seconds": 60}})
    explanation = stalled.explain(MatchContext(state=state, config=build_config({})))
    assert (explanation.matched, explanation.expected, explanation.actual) == \
        (True, "alive trainer without progress for >= 60 s", "61.5")
    loss = _CLAUSE.validate_python({"metric": {"name": "loss", "op": "ratio_to_median_above", "value": 2.5, "consecutive": 2}})
    state = snap({"metrics": {"loss_history": [3.0, 9.0, 12.0], "loss_median": 3.0}})
    explanation = loss.explain(MatchContext(state=state, config=build_config({})))
    assert (explanation.matched, explanation.actual) == (True, "[3.0, 4.0]")


def test_every_kind_documents_itself():
    for kind, clause in CLAUSE_TYPES.items():
        assert clause.kind == kind and clause.doc.strip() and clause.example.startswith(f"{kind}:")
        assert isinstance(_CLAUSE.validate_python(YAML(typ="safe", pure=True).load(clause.example)), clause)
