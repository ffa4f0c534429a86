"""Which playbooks a run uses: the set shipped inside runbook's package, then the project's own.

A project playbook with the same `name` as a shipped one replaces it (a team tunes `oom` without
copying the other twelve); any other name adds to the set. Shipped playbooks live in the repository's
playbooks/ folder; a wheel carries them as package data (engine/shipped_playbooks/, mapped in
pyproject.toml), so an installed runbook finds them wherever it runs.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.language.playbook import Playbook
from engine.language.loader import playbook_files, read_playbook_files, set_problems
from engine.language.metric_needs import unprovided_metrics
from engine.core.yaml_source import SourceError, load_yaml, locate

if TYPE_CHECKING:
    from engine.core.config import LoadedConfig

def _shipped_dir() -> Path:
    installed = Path(__file__).resolve().parents[1] / "shipped_playbooks"   # a wheel's package data
    return installed if installed.is_dir() else Path(__file__).resolve().parents[2] / "playbooks"   # a checkout


SHIPPED_DIR = _shipped_dir()


def shipped_files() -> list[Path]:
    return playbook_files([SHIPPED_DIR])


def origin(playbook: Playbook) -> str:
    """'shipped' or the project file the playbook comes from."""
    source = playbook.source_file
    return "shipped" if source is not None and Path(source).resolve().parent == SHIPPED_DIR else str(source)


@dataclass(frozen=True)
class Replacement:
    project: Playbook
    shipped: Playbook

    def note(self) -> str:
        return f"{self.project.source_file}: playbook '{self.project.name}' replaces the shipped one of the same name"


def merge(shipped: list[Playbook], project: list[Playbook]) -> tuple[list[Playbook], list[Replacement]]:
    """PURE. The shipped playbooks no project playbook names, then the project's; and what was replaced."""
    by_name = {p.name: p for p in project}
    replaced = [Replacement(by_name[s.name], s) for s in shipped if s.name in by_name]
    return [s for s in shipped if s.name not in by_name] + project, replaced


def read_set(project_paths: list[Path], include_shipped: bool) -> tuple[list[Playbook], list[str], list[Replacement]]:
    """(playbooks, file:line errors, replacements) of shipped + project files; lint reports from this.
    In runbook's own repository the project's playbooks/ is the shipped folder itself: read once."""
    if include_shipped:
        project_paths = [p for p in project_paths if Path(p).resolve() != SHIPPED_DIR]
    project, errors = read_playbook_files(playbook_files(project_paths))
    shipped, shipped_errors = read_playbook_files(shipped_files()) if include_shipped else ([], [])
    playbooks, replaced = merge(shipped, project)
    return playbooks, shipped_errors + errors, replaced


def load_set(project_paths: list[Path], include_shipped: bool = True) -> tuple[list[Playbook], list[Replacement]]:
    """Every playbook a run uses; all problems of all files reported together (SourceError)."""
    playbooks, errors, replaced = read_set(project_paths, include_shipped)
    errors += [problem.message() for problem in set_problems(playbooks)]
    if errors:
        raise SourceError(errors)
    return playbooks, replaced


def load_run_playbooks(loaded: LoadedConfig, adapter: object) -> list[Playbook]:
    """The playbooks of a run config: shipped (unless playbooks.shipped is false) + playbooks.paths; refused
    (SourceError, file:line) where one's metric clause names a metric the run's trainer (`adapter`) never prints."""
    playbooks = load_set(loaded.playbook_paths, loaded.config.playbooks.shipped)[0]
    kind = getattr(adapter, "name", loaded.config.trainer.kind)
    if errors := unprovided_metrics(playbooks, getattr(adapter, "metrics_provided", None), kind):
        raise SourceError(errors)
    if errors := unknown_routed_playbooks(loaded, playbooks):
        raise SourceError(errors)
    return playbooks


def unknown_routed_playbooks(loaded: LoadedConfig, playbooks: list[Playbook]) -> list[str]:
    """A receiver whose route names a playbook the run does not have would never get that incident (a typo,
    a playbook renamed or dropped): refused with the run config's file:line, and the names it could mean."""
    known = sorted(p.name for p in playbooks)
    problems: list[str] = []
    tree = None
    for i, receiver in enumerate(loaded.config.notifications.receivers):
        for j, name in enumerate(receiver.match.playbooks):
            if name in known:
                continue
            if tree is None:
                tree = load_yaml(loaded.path)
            where = locate(tree, ("notifications", "receivers", i, "match", "playbooks", j))
            position = f"{loaded.path}:{where[0]}:{where[1]}" if where else str(loaded.path)
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; the run's playbooks: {', '.join(known)}"
            problems.append(f"{position}: notifications.receivers.{i}.match.playbooks: no playbook is named "
                            f"{name!r} (receiver {receiver.name!r} would never get it){hint}")
    return problems
