"""`runbook check` for kind hf-trainer runs the user's own argument parser on the argv a launch gets
(engine/trainers/hf/parse_check.py, runbook/hf_parse_probe.py): what it parses is what trains (issue 44 item 5:
check said it checked "tokenizer, hf-trainer's config parser" where it only looked for the script). The shipped
example passing it: tests/trainers/test_init_from_script.py."""

from __future__ import annotations

import pytest

from engine.trainers import adapter_for
from engine.trainers.hf.parse_check import compare
from engine.trainers.run_config import load_config
from tests.trainers.projects import TRAINERS, make_project

VALUES = {"out_dir": "/p/out", "micro_batch_size": 4, "grad_accum": 2, "lr": "0.003", "max_steps": 24,
          "save_interval": 4, "seed": 1337}
PARSED = {"output_dir": "/p/out", "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
          "learning_rate": 0.003, "max_steps": 24, "save_steps": 4.0, "seed": 1337, "save_only_model": False,
          "save_total_limit": None}


def test_what_the_parser_took_as_runbook_passed_it_is_no_problem_and_anything_else_is_named():
    assert compare(PARSED, VALUES) == []
    forced = compare({**PARSED, "learning_rate": 0.01, "save_total_limit": 2}, VALUES)
    assert len(forced) == 2 and forced[0].startswith("learning_rate is 0.01 where runbook passes '0.003' (the run config's lr)")
    assert "save_total_limit is 2" in forced[1]


def problems_of(tmp_path, script_text: str | None = None) -> list[str]:
    project = make_project(tmp_path / "project", TRAINERS["hf-trainer"])
    project.set(trainer={"preflight_parse": True})
    if script_text is not None:
        (project.root / "train.py").write_text(script_text)
        project.set(trainer={"script": "train.py", "args": []})
    loaded = load_config(project.config)
    return adapter_for("hf-trainer").check_environment(loaded)


@pytest.mark.slow
def test_a_script_that_forces_its_own_learning_rate_after_runbooks_flags_is_refused(tmp_path):
    script = ("import sys\nfrom transformers import HfArgumentParser, TrainingArguments\n"
              "args, = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(sys.argv[1:] + ['--learning_rate', '0.01'])\n"
              "raise SystemExit('trained')\n")
    problems = problems_of(tmp_path, script)
    assert len(problems) == 1 and "learning_rate is 0.01 where runbook passes" in problems[0], problems
    assert "run_config.yaml:" in problems[0]                       # file:line of trainer.args


@pytest.mark.slow
def test_a_script_whose_parser_is_not_hf_trainers_is_refused_with_its_own_error(tmp_path):
    script = "import argparse\nargparse.ArgumentParser().parse_args()\n"
    problems = problems_of(tmp_path, script)
    assert len(problems) == 1 and "parser exited 2" in problems[0] and "unrecognized arguments" in problems[0], problems
