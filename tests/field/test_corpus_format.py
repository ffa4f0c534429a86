"""Format checks for the field corpus of real training-failure log endings.

The corpus lives in tests/field/corpus/*.yaml, one file per training stack.
Every case cites the public thread its log lines were taken from.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

CORPUS_DIR = Path(__file__).parent / "corpus"

CLASSES = {
    "oom",
    "nan",
    "disk-full",
    "corrupt-checkpoint",
    "collective-timeout",
    "rank-died",
    "killed",
    "preemption",
    "time-limit",
    "bad-data",
    "hang",
    "hardware-failure",
    "needs-human",
    "stopped",
}
LAUNCHERS = {"torchrun", "deepspeed", "srun", "none"}
SOURCE_RE = re.compile(r"^[\w.-]+/[\w.-]+#\d+$")
SIGNAL_RE = re.compile(r"^SIG[A-Z0-9]+$")


def _load_all():
    yaml = YAML(typ="safe")
    docs = {}
    for path in sorted(CORPUS_DIR.glob("*.yaml")):
        docs[path.name] = yaml.load(path.read_text(encoding="utf-8"))
    return docs


DOCS = _load_all()
CASES = [(name, case) for name, doc in DOCS.items() for case in doc["cases"]]


def test_files_have_stack_and_cases():
    assert DOCS, "no corpus files found"
    for name, doc in DOCS.items():
        assert isinstance(doc, dict), name
        assert doc.get("stack") == name[: -len(".yaml")], name
        assert isinstance(doc.get("cases"), list) and doc["cases"], name


def test_ids_unique():
    ids = [case["id"] for _, case in CASES]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, dupes


def test_totals():
    assert len(CASES) >= 80
    assert len(DOCS) >= 8
    escalate = [c for _, c in CASES if c.get("no_auto_recovery") is True]
    assert len(escalate) >= 15


@pytest.mark.parametrize("name,case", CASES, ids=[c["id"] for _, c in CASES])
def test_case_shape(name, case):
    source = case["source"]
    assert isinstance(source, str)
    assert SOURCE_RE.match(source) or source.startswith("docs:"), source

    assert case["expect"] in CLASSES, case["expect"]
    assert case.get("launcher") in LAUNCHERS, case.get("launcher")

    exit_ = case["exit"]
    if exit_ is not None:
        assert isinstance(exit_, dict)
        assert len(exit_) == 1 and set(exit_) <= {"code", "signal"}, exit_
        if "code" in exit_:
            assert isinstance(exit_["code"], int)
        else:
            assert SIGNAL_RE.match(exit_["signal"]), exit_

    nar = case.get("no_auto_recovery", False)
    assert isinstance(nar, bool)
    if case["expect"] in {"hardware-failure", "needs-human"}:
        assert nar is True, case["id"]

    log = case["log"]
    assert isinstance(log, str) and log.strip()
    assert len(log.splitlines()) < 60
