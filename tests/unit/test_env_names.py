"""Issue 26 item 4: every environment variable name and value is checked where it enters.

The run config's `trainer.env` and a playbook's `set_env: {vars: ...}` are refused at load with
file:line (config loader, playbook loader and lint); a rendered set_env value is checked again at
plan time; a journaled `env` entry (written by an earlier runbook) that fails the rules is reported,
skipped and never passed to a launch, so it cannot turn into an exit 12 at every start.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from engine.core.config import RunConfig
from engine.core.env_names import env_problem
from engine.core.state import StateSnapshot
from engine.core.yaml_source import SourceError
from engine.language.planner import PlannedStep, plan
from engine.language.playbook import build_playbook
from engine.records.journal import Journal
from engine.records.journal_lines import encode
from engine.trainers.run_config import load_config
from runbook.cli import app
from runbook.exit_codes import ExitCode

BAD = [
    ("", "x"), ("1ABC", "x"), ("A=B", "x"), ("A B", "x"), ("A-B", "x"), ("A.B", "x"), ("Ä", "x"),
    ("A\x00B", "x"), ("A", "x\x00y"), ("X" * 300, "x"), ("A", "v" * 200_000),
]
GOOD = [("NCCL_DEBUG", "INFO"), ("_x1", ""), ("A", "with = and spaces and ünïcode")]


@pytest.mark.parametrize("name,value", BAD)
def test_bad_names_and_values_have_a_reason(name, value):
    assert env_problem(name, value)


@pytest.mark.parametrize("name,value", GOOD)
def test_posix_names_pass(name, value):
    assert env_problem(name, value) is None


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proj" / "configs" / "run_config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("name,value", [b for b in BAD if len(b[1]) < 1000 and len(b[0]) < 100])
def test_run_config_env_is_refused_with_file_line(tmp_path, name, value):
    path = _config(tmp_path, "trainer:\n  device: cpu\n  env:\n    " + json.dumps(name) + ": " + json.dumps(value) + "\n")
    with pytest.raises(SourceError) as err:
        load_config(path)
    assert f"{path}:" in str(err.value) and "trainer.env" in str(err.value)


def _playbook(vars_yaml: str) -> str:
    return ("name: envy\ndescription: x\nmatch:\n  all:\n    - stalled: {}\nactions:\n"
            f"  - set_env: {{vars: {vars_yaml}}}\n")


@pytest.mark.parametrize("name,value", [b for b in BAD if len(b[1]) < 1000 and len(b[0]) < 100])
def test_set_env_in_a_playbook_is_refused_by_lint_with_file_line(tmp_path, name, value):
    (tmp_path / "p.yaml").write_text(_playbook("{" + json.dumps(name) + ": " + json.dumps(value) + "}"))
    result = CliRunner().invoke(app, ["playbooks", "lint", str(tmp_path)])
    assert result.exit_code == ExitCode.INVALID, result.output
    assert "p.yaml:" in result.output and "Traceback" not in result.output


def test_a_templated_value_is_checked_once_rendered():
    book = build_playbook(yaml.safe_load(_playbook('"{{ dict(A=1)|tojson|replace(\'{\', \'\')|length > 0 and {\'A.B\': \'1\'} }}"')))
    (step,) = plan(book, StateSnapshot(), RunConfig())
    assert step.params is None and "not an environment variable name" in step.error


def test_a_stored_plan_with_a_bad_set_env_fails_that_step_not_the_watcher():
    step = PlannedStep.from_dict({"index": 0, "verb": "set_env", "params": {"vars": {"A.B": "1"}}})
    assert step.params is None and "not an environment variable name" in step.error


@pytest.mark.parametrize("name,value", [b for b in BAD if len(b[1]) < 1000])
def test_a_journaled_env_entry_that_fails_is_reported_and_skipped(tmp_path, name, value):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(encode({"time": 1.7e9, "kind": "env", "vars": {"GOOD": "1"}})
                     + encode({"time": 1.7e9 + 1, "kind": "env", "vars": {name: value}})
                     + encode({"time": 1.7e9 + 2, "kind": "env", "vars": {"LATER": "2"}}))
    journal = Journal(path)
    state = journal.replay()
    assert state.extra_env == {"GOOD": "1", "LATER": "2"}
    (problem,) = journal.problems
    assert problem.line == 2 and "delete that line" in str(problem) and "skipped" in str(problem)
