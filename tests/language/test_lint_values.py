"""`runbook playbooks lint` refuses values that can only fail later (issue 26): a templated lr that
renders non-finite, a batch_size the run config would refuse, a rollback bad_step that is no number."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from runbook.cli import app
from runbook.exit_codes import ExitCode

CASES = {
    "non-finite lr": ('set_hyperparameters: {lr: "{{ 1e308 * 10 }}"}', "finite number"),
    "indivisible batch": ('set_hyperparameters: {batch_size: "{{ config.micro_batch_size * 3 + 1 }}"}',
                          "must be a multiple of micro_batch_size"),
    "bad_step in words": ('rollback: {bad_step: "yesterday"}', "valid integer"),
}


@pytest.mark.parametrize("name", CASES)
def test_lint_refuses_values_that_can_only_fail(tmp_path, name):
    action, words = CASES[name]
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\ndescription: t\nmatch: {{exit: {{nonzero: true}}}}\nactions:\n  - {action}\n")
    result = CliRunner().invoke(app, ["playbooks", "lint", str(path)])
    assert result.exit_code == ExitCode.INVALID, result.output
    assert f"{path}:5:" in result.output and words in result.output


def test_a_value_that_depends_on_the_state_is_not_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text('name: p\ndescription: t\nmatch: {exit: {nonzero: true}}\nactions:\n'
                    '  - rollback: {bad_step: "{{ state.metrics.step or 0 }}"}\n'
                    '  - set_hyperparameters: {lr: "{{ config.lr / 2 }}"}\n')
    result = CliRunner().invoke(app, ["playbooks", "lint", str(path)])
    assert result.exit_code == ExitCode.OK, result.output
