"""A wrong type where the run config names the user's litgpt YAML (`trainer.litgpt_config: true`, a number,
a list, a map) or its overrides (`trainer.extra: 5`) is a config error with file:line, the key and what
was expected, and the config-error exit code, in every command that loads the config (issue 34).
Before the fix the overlay called Path(True) and every command died with a TypeError."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.core.yaml_source import SourceError
from engine.trainers.run_config import load_config
from runbook.exit_codes import ExitCode
from tests.conftest import RUNBOOK

WRONG = {"bool": ("litgpt_config", "true"), "int": ("litgpt_config", "7"), "list": ("litgpt_config", "[a.yaml]"),
         "map": ("litgpt_config", "{path: a.yaml}"), "empty": ("litgpt_config", '""'), "extra int": ("extra", "5")}


def _config(tmp_path: Path, key: str, value: str) -> Path:
    path = tmp_path / "proj" / "configs" / "run_config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(f"lr: 0.003\ntrainer:\n  kind: litgpt\n  {key}: {value}\n")
    return path


@pytest.mark.parametrize("case", list(WRONG), ids=list(WRONG))
def test_a_wrong_type_for_a_trainer_file_key_is_a_config_error_with_file_line(tmp_path, case):
    key, value = WRONG[case]
    path = _config(tmp_path, key, value)
    with pytest.raises(SourceError) as err:
        load_config(path)
    [message] = err.value.messages
    assert message.startswith(f"{path}:4:3: trainer.{key}: expected "), message


@pytest.mark.parametrize("command", ["check", "status", "incidents", "verify"])
def test_every_command_exits_with_the_config_error_code_on_litgpt_config_true(tmp_path, command):
    path = _config(tmp_path, "litgpt_config", "true")
    result = subprocess.run([RUNBOOK, command, str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == ExitCode.BAD_CONFIG, result.stdout + result.stderr
    assert f"{path}:4:3: trainer.litgpt_config: expected a path" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
