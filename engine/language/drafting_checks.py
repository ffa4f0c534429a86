"""What a drafted playbook would do: its own tests (actions pinned), and which past decisions it changes.

PURE: playbooks, records and the run config in, results out. `runbook playbooks draft` prints them.
A past decision "changes" when replaying the record with the draft added decides differently from
replaying it with today's playbooks alone: the difference is the draft's, not an older edit's.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from engine.language.playbook import Playbook, build_playbook
from engine.language.playbook_testing import TestResult, run_test
from engine.language.replay import RecordError, recorded_config, replay
from engine.records.signature import signature_of_record
from engine.core.config import RunConfig


def as_yaml(tree: dict, header: str = "") -> str:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    buffer = io.StringIO()
    yaml.dump(tree, buffer)
    return header + buffer.getvalue()


def with_pinned_actions(tree: dict, playbooks: list[Playbook]) -> tuple[Playbook, list[TestResult]]:
    """The draft as a Playbook, its firing tests' `expect_actions` set to what it plans, and every test's result."""
    playbook = build_playbook(tree)
    for test, spec in zip(playbook.tests, tree["tests"]):
        if spec.get("expect_fires_at") is not None:
            planned = run_test(playbook, test, playbooks).actions
            if planned is not None:
                spec["expect_actions"] = planned
    playbook = build_playbook(tree)
    others = [p for p in playbooks if p.name != playbook.name]
    return playbook, [run_test(playbook, test, [playbook, *others]) for test in playbook.tests]


def others_tests_with(draft: Playbook, playbooks: list[Playbook]) -> list[TestResult]:
    """Every other playbook's tests with the draft in the set (it takes part in their inhibitions)."""
    pool = [p for p in playbooks if p.name != draft.name] + [draft]
    return [run_test(p, t, pool) for p in pool if p is not draft for t in p.tests]


@dataclass(frozen=True)
class Change:
    incident_id: str
    before: str                 # today's playbooks' decision, in words
    after: str                  # with the draft added
    expected: bool              # the drafted incident, or one of its signature: the change is the point


def changed_decisions(records: list[dict], today: list[Playbook], draft: Playbook, config: RunConfig,
                      drafted: dict) -> tuple[list[Change], list[str]]:
    """Every record whose replayed decision the draft changes, and the records that could not be replayed."""
    target = signature_of_record(drafted)
    changes, problems = [], []
    with_draft = [p for p in today if p.name != draft.name] + [draft]
    for record in records:
        recorded, _ = recorded_config(record, config)
        try:
            now = replay(record, today, recorded, earlier=records).now
            then = replay(record, with_draft, recorded, earlier=records).now
        except RecordError as error:
            problems.append(str(error))
            continue
        if (now.kind, now.playbook, [a.key for a in now.actions]) == (then.kind, then.playbook, [a.key for a in then.actions]):
            continue
        sig = signature_of_record(record)
        expected = record.get("id") == drafted.get("id") or (sig is not None and target is not None and sig.id == target.id)
        changes.append(Change(str(record.get("id")), now.headline(), then.headline(), expected))
    return changes, problems


__all__ = ["Change", "as_yaml", "changed_decisions", "others_tests_with", "with_pinned_actions"]
