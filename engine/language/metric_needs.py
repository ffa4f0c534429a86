"""Playbooks against what the run's trainer prints: a `metric` clause on a metric its trainer kind never fills
(a trainer that prints no grad norm) would validate and never fire; it is refused at load, with its file:line."""

from __future__ import annotations

from typing import get_args

from engine.language.clauses import walk
from engine.language.clauses.metric import MetricClause, MetricName
from engine.language.loader import where
from engine.language.playbook import Playbook

METRIC_NAMES = frozenset(get_args(MetricName))


def unprovided_metrics(playbooks: list[Playbook], provided: frozenset[str] | None, kind: str) -> list[str]:
    """One file:line sentence per metric clause naming a metric outside `provided` (None: the trainer does not say)."""
    if provided is None:
        return []
    problems = []
    for playbook in playbooks:
        for loc, clause in walk(playbook.match, ("match",)):
            if isinstance(clause, MetricClause) and clause.metric.name not in provided:
                at = loc + ("metric", "name")
                problems.append(
                    f"{where(playbook.source_file, at)}: {'.'.join(map(str, at))}: trainer kind '{kind}' never prints "
                    f"{clause.metric.name}, so playbook '{playbook.name}' could never fire; its kind fills "
                    f"{', '.join(sorted(provided))}")
    return problems
