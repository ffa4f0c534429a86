"""runbook as an installed package: the shipped playbooks travel in the wheel, a project's own
playbooks add to them or replace one by name, and the dependency ranges agree with what is refused."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.language.playbook_set import SHIPPED_DIR, load_set, merge, origin
from engine.trainers.litgpt.support import SUPPORTED_RANGE, version_problem
from runbook.cli import app
from runbook.exit_codes import ExitCode
from tests.conftest import require_capability

REPO = Path(__file__).resolve().parents[2]
SHIPPED_NAMES = sorted(p.name for p in SHIPPED_DIR.glob("*.yaml"))
OOM_AGAIN = """name: oom
description: the project's own OOM recovery
match: {log: {pattern: 'CUDA out of memory'}}
actions:
  - stop: {}
"""
EXTRA = """name: team-alert
description: a playbook only this project has
match: {stalled: {}}
actions:
  - stop: {}
"""


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def project_with_playbooks(root: Path, **files: str) -> Path:
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "run_config.yaml").write_text((REPO / "configs" / "run_config.yaml").read_text())
    (root / "playbooks").mkdir()
    for name, text in files.items():
        (root / "playbooks" / f"{name}.yaml").write_text(text)
    return root / "configs" / "run_config.yaml"


@pytest.mark.slow
def test_the_wheel_holds_the_shipped_playbooks(tmp_path):
    source = tmp_path / "src"   # a copy: building in place would leave build/ in the repository
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("engine", "runbook", "playbooks"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(tmp_path / "wheel")], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("runbook_pretrain-*.whl")   # the distribution is runbook-pretrain
    names = zipfile.ZipFile(wheel).namelist()
    shipped = "engine/shipped_playbooks/"   # the repository's playbooks/, mapped in pyproject.toml
    assert sorted(n.removeprefix(shipped) for n in names if n.startswith(shipped)) == SHIPPED_NAMES
    assert "tests/toy_trainer/adapter.py" not in names and not any(n.startswith("playbooks/") for n in names)
    # an installed copy finds them there, not in a checkout
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    found = subprocess.run([sys.executable, "-c", "from engine.language.playbook_set import SHIPPED_DIR; print(SHIPPED_DIR)"],
                           capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin"})
    assert found.stdout.strip() == str(site / "engine" / "shipped_playbooks"), found.stdout + found.stderr


def test_pyproject_lists_every_package():
    """The package list is explicit (the shipped playbooks are a mapped data package): none may be forgotten."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for root in ("engine", "runbook")
               for p in (REPO / root).rglob("__init__.py")}
    assert listed == on_disk | {"engine.shipped_playbooks"}


def test_a_project_without_playbooks_folder_uses_the_shipped_set(tmp_path):
    config = project_with_playbooks(tmp_path / "p")
    (tmp_path / "p" / "playbooks").rmdir()
    result = cli("playbooks", "list", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert f"{len(SHIPPED_NAMES)} playbook(s): {len(SHIPPED_NAMES)} shipped, 0 from the project" in result.stdout


def test_a_project_playbook_replaces_the_shipped_one_of_its_name_and_others_add(tmp_path):
    config = project_with_playbooks(tmp_path / "p", oom=OOM_AGAIN, extra=EXTRA)
    listed = cli("playbooks", "list", "--config", str(config))
    assert listed.exit_code == 0, listed.output
    own = tmp_path / "p" / "playbooks"
    assert f"{own / 'oom.yaml'} (replaces the shipped one)" in listed.stdout
    assert str(own / "extra.yaml") in listed.stdout
    assert f"{len(SHIPPED_NAMES) + 1} playbook(s): {len(SHIPPED_NAMES) - 1} shipped, 2 from the project (1 replacing" in listed.stdout
    lint = cli("playbooks", "lint", "--config", str(config))
    assert lint.exit_code == 0, lint.output
    assert f"{own / 'oom.yaml'}: playbook 'oom' replaces the shipped one of the same name" in lint.stdout
    assert f"{len(SHIPPED_NAMES) + 1} playbook(s) valid" in lint.stdout
    playbooks, _ = load_set([own])
    assert origin(next(p for p in playbooks if p.name == "oom")) == str(own / "oom.yaml")
    assert origin(next(p for p in playbooks if p.name == "nan")) == "shipped"


def test_two_project_playbooks_of_one_name_are_still_refused(tmp_path):
    config = project_with_playbooks(tmp_path / "p", oom=OOM_AGAIN, oom2=OOM_AGAIN)
    result = cli("playbooks", "lint", "--config", str(config))
    assert result.exit_code == ExitCode.INVALID and "duplicate playbook name 'oom'" in result.stdout


def test_shipped_false_uses_only_the_project_set(tmp_path):
    config = project_with_playbooks(tmp_path / "p", extra=EXTRA)
    config.write_text(config.read_text().replace("  shipped: true", "  shipped: false"))
    result = cli("playbooks", "list", "--config", str(config))
    assert result.exit_code == 0 and "1 playbook(s): 0 shipped, 1 from the project" in result.stdout


def test_a_named_playbook_folder_that_does_not_exist_is_refused(tmp_path):
    config = project_with_playbooks(tmp_path / "p")
    config.write_text(config.read_text().replace("paths: [playbooks]", "paths: [team-playbooks]"))
    result = cli("playbooks", "list", "--config", str(config))
    assert result.exit_code == ExitCode.INVALID and "team-playbooks: no such playbook file or folder" in result.output


def test_merge_keeps_shipped_order_and_reports_each_replacement():
    shipped, _ = load_set([], include_shipped=True)
    project = [p for p in shipped if p.name == "hang"]
    merged, replaced = merge(shipped, project)
    assert [p.name for p in merged].count("hang") == 1 and [r.shipped.name for r in replaced] == ["hang"]


def test_pyproject_allows_the_litgpt_range_runbook_accepts():
    try:
        import tomllib
    except ImportError:   # Python 3.10 (supported); CI runs 3.11, so there this is a failure
        require_capability("tomllib is in the standard library from Python 3.11; this is 3.10")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps, extra = project["dependencies"], project["optional-dependencies"]["litgpt"]   # litgpt is an extra (issue 36)
    assert f"litgpt{SUPPORTED_RANGE}" in extra and not [d for d in deps if d.startswith(("litgpt", "litdata", "torch"))]
    assert "runbook-pretrain[litgpt]" in project["optional-dependencies"]["test"]   # the suite trains litgpt models
    assert not [d for d in deps + extra if "==" in d], "exact pins belong in constraints.txt"
    from importlib.metadata import version

    assert version_problem(version("litgpt")) is None   # the installed (tested) version is inside the range


@pytest.mark.parametrize("version", ["0.5.12", "0.6.0", "1.0.0", "0.6.0rc1", None])
def test_an_unsupported_litgpt_version_is_one_sentence(version):
    problem = version_problem(version)
    assert problem is not None and problem.count(". ") == 0 and SUPPORTED_RANGE in problem
