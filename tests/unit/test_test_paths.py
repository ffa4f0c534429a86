"""Every test file the docs and the code name exists: tests moved into tests/<group>/ left 39 references to
tests/test_*.py behind, pointing readers at nothing."""

from __future__ import annotations

import re

from tests.conftest import REPO

NAMED = re.compile(r"\btests/(?:[a-z_]+/)*test_[a-z0-9_]+\.py")


def named_test_files() -> dict[str, set[str]]:
    sources = [REPO / "README.md", *(REPO / "docs").rglob("*.md"),
               *(p for folder in ("engine", "runbook", "benchmarks", "tests", "scripts") for p in (REPO / folder).rglob("*.py"))]
    found: dict[str, set[str]] = {}
    for source in sources:
        for name in NAMED.findall(source.read_text(errors="replace")):
            found.setdefault(name, set()).add(str(source.relative_to(REPO)))
    return found


def test_every_test_file_the_docs_and_code_name_exists():
    named = named_test_files()
    assert len(named) >= 20, named   # the scan reads the docs and the code (it found 0 once it lost its way)
    missing = {name: sorted(where) for name, where in named.items() if not (REPO / name).is_file()}
    assert not missing, missing
