"""A typo on a typed model in a playbook expression (`state.trainer.alvie`) is an error with file:line and
a suggestion, in `runbook playbooks lint` (exit 8) and in the loader `runbook watch` uses (issue 34).
Before: lint exited 0 (a warning at most) and the condition failed closed at every observation, so
the playbook could never fire."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.core.yaml_source import SourceError
from engine.language.loader import load_playbook_file
from engine.language.typed_names import unknown_names
from runbook.cli import app
from runbook.exit_codes import ExitCode

HEAD = "name: typo\ndescription: a typo on a typed model\n"
TYPOS = {   # where the expression is -> (playbook body, line:col, the sentence's text)
    "match expr": ("match:\n  all:\n    - expr: 'state.trainer.alvie'\nactions:\n  - escalate: {reason: x}\n",
                   "5:7", "match.all.0.expr: state.trainer.alvie: TrainerStatus has no 'alvie' (did you mean alive?)"),
    "step guard": ("match:\n  all:\n    - stalled: {}\nactions:\n  - stop: {}\n    if: 'state.metrics.stpe > 3'\n",
                   "8:5", "actions.0.if: state.metrics.stpe: Metrics has no 'stpe' (did you mean step?)"),
    "computed param": ("match:\n  all:\n    - stalled: {}\nactions:\n  - set_hyperparameters:\n      lr: '{{ config.lrr / 2 }}'\n",
                       "8:7", "actions.0.set_hyperparameters.lr: config.lrr: RunConfig has no 'lrr' (did you mean lr?)"),
    "template": ("match:\n  all:\n    - stalled: {}\nactions:\n  - escalate:\n      reason: 'at {{ state.metrics.stpe }}'\n",
                 "8:7", "actions.0.escalate.reason: state.metrics.stpe: Metrics has no 'stpe' (did you mean step?)"),
    "wait_for": ("match:\n  all:\n    - stalled: {}\nactions:\n  - wait_for:\n      condition: 'state.disk.free_byte > 0'\n"
                 "      timeout: 5\n", "8:7", "state.disk.free_byte: DiskStatus has no 'free_byte' (did you mean free_bytes?)"),
}


@pytest.mark.parametrize("case", list(TYPOS), ids=list(TYPOS))
def test_lint_reports_a_typo_on_a_typed_model_with_file_line_and_a_suggestion(tmp_path: Path, case):
    body, where, sentence = TYPOS[case]
    (tmp_path / "typo.yaml").write_text(HEAD + body)
    result = CliRunner().invoke(app, ["playbooks", "lint", str(tmp_path)])
    assert result.exit_code == ExitCode.INVALID, result.output
    assert f"{tmp_path / 'typo.yaml'}:{where}: " in result.stdout and sentence in result.stdout, result.stdout
    assert "0 playbook(s) valid, 1 invalid" in result.stdout


def test_the_loader_refuses_the_typo_so_watch_cannot_run_a_playbook_that_never_fires(tmp_path: Path):
    path = tmp_path / "typo.yaml"
    path.write_text(HEAD + TYPOS["match expr"][0])
    with pytest.raises(SourceError) as err:
        load_playbook_file(path)
    assert f"{path}:5:7: match.all.0.expr: state.trainer.alvie: TrainerStatus has no 'alvie'" in str(err.value)


@pytest.mark.parametrize("source", [
    "state.trainer.alive and state.metrics.loss > 3",                  # fields
    "state.trainer.ranks.dead_nodes | length > 0",                     # a nested model, a filter
    "state.metrics['loss'] > 3",                                       # subscript of a model
    "config.trainer.env.FOO == 'x'",                                   # below a dict: the data's names
    "state.metrics.loss_history.count(3) > 0",                         # below a list: its methods
    "config.trainer.precision == '32-true' and config.model.n_layer > 1",   # litgpt's settings: names by trainer.kind
])
def test_names_the_models_have_are_not_reported(source):
    assert unknown_names(source, "condition") == []


def test_a_name_the_template_sets_itself_is_not_the_model():
    assert unknown_names("{% set state = {'x': 1} %}{{ state.x }}", "template") == []
