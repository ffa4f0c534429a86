"""`runbook triage` infers from the log what it can, refuses what is no exit status, and says which evidence
was missing (issues 34 and 35). Through the real CLI (runbook.cli's app) and the shipped playbooks."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from engine.language.playbook import Playbook
from engine.language.playbook_set import load_set
from runbook.cli import app
from runbook.exit_codes import ExitCode

PROGRESS = "Epoch 1 | iter {i} step {s} | loss train: {loss}, val: n/a | iter time: 20.00 ms (step) remaining time: 0:00:09"
OOM_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/home/u/train.py", line 88, in <module>',
    "    loss.backward()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 172.00 MiB (GPU 0; 23.70 GiB total capacity)",
]
RELAUNCHING = {"resume", "rollback"}


def triage(tmp_path, lines: list[str], *args: str) -> tuple[int, str]:
    log = tmp_path / "trainer.log"
    log.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, ["triage", str(log), *args])
    return result.exit_code, result.output


def test_a_plain_cuda_oom_traceback_without_exit_is_an_oom_read_from_its_ending(tmp_path):
    code, out = triage(tmp_path, [PROGRESS.format(i=4, s=1, loss=6.4), *OOM_TRACEBACK], "--json")
    report = json.loads(out)
    assert code == ExitCode.OK and report["playbook"] == "oom", report   # not unknown-exit at the same micro-batch
    assert report["exit"]["code"] == 1 and report["exit"]["given"] == "exit 1 (inferred)", report["exit"]
    assert any("not given: read as exit 1 (inferred) from a Python traceback" in note for note in report["missing"]), report["missing"]
    assert "set_hyperparameters" in [step["verb"] for step in report["plan"]]


def test_an_oom_pasted_without_its_traceback_header_is_read_from_its_last_lines(tmp_path):
    # The field's shape (tests/field/corpus litgpt-litllama-137): the error line and its wrapped message only.
    lines = ["OutOfMemoryError: CUDA out of memory. Tried to allocate 172.00 MiB (GPU 0; 23.70",
             "GiB total capacity; 22.87 GiB already allocated; 120.75 MiB free; 22.89 GiB",
             "Management and PYTORCH_CUDA_ALLOC_CONF\"."]
    report = json.loads(triage(tmp_path, lines, "--json")[1])
    assert report["playbook"] == "oom" and report["exit"]["given"] == "exit 1 (inferred)", report
    assert any("an uncaught exception (OutOfMemoryError)" in note for note in report["missing"]), report["missing"]


def test_a_log_still_training_at_its_end_infers_nothing_and_says_what_an_exit_would_decide(tmp_path):
    # An OOM caught by the trainer (a batch-size finder), then training went on: no ending to read.
    code, out = triage(tmp_path, [*OOM_TRACEBACK, PROGRESS.format(i=8, s=2, loss=6.1)], "--json")
    report = json.loads(out)
    assert report["exit"]["known"] is False and report["playbook"] == "unknown-exit", report
    assert any("the exit status: with a non-zero exit (--exit 1) 'oom' would fire" in note for note in report["missing"]), report["missing"]


@pytest.mark.parametrize("value", ["256", "1e20", "-65", "1.5", "99999999999999999999999", "nine"])
def test_an_exit_that_is_no_exit_status_is_refused_with_the_usage_code(tmp_path, value):
    code, out = triage(tmp_path, OOM_TRACEBACK, f"--exit={value}")
    assert code == ExitCode.USAGE, out
    assert "an exit status is an integer from -64 to 255" in out


@pytest.mark.parametrize("value", ["255", "-64", "137", "0"])
def test_every_exit_status_in_range_is_accepted(tmp_path, value):
    code, out = triage(tmp_path, OOM_TRACEBACK, f"--exit={value}", "--json")
    assert code in (ExitCode.OK, ExitCode.TRIAGE_ESCALATE), out
    assert json.loads(out)["exit"]["given"] == f"exit {value}"


def test_the_deciding_playbook_states_what_it_acts_on_in_the_report(tmp_path):
    code, out = triage(tmp_path, OOM_TRACEBACK, "--exit", "1")
    assert code == ExitCode.OK
    assert "it acts on:" in out and "the allocator's out-of-memory words" in out, out
    code, out = triage(tmp_path, OOM_TRACEBACK, "--exit", "1", "--json")
    decision = json.loads(out)["decision"]
    assert decision["acts_on"][0].startswith("the trainer ended non-zero")
    assert decision["evidence"] == decision["acts_on"]   # the key's old name, still written for old readers


def test_a_playbook_written_with_the_old_evidence_key_still_reads_as_acts_on():
    oom = next(p for p in load_set([], True)[0] if p.name == "oom")
    data = oom.model_dump(by_alias=True, exclude={"acts_on"})
    old = Playbook.model_validate({**data, "evidence": ["a SIGKILL with memory evidence"]})
    assert old.acts_on == ["a SIGKILL with memory evidence"]
    with pytest.raises(ValidationError):   # nothing else unknown slips through with it
        Playbook.model_validate({**data, "evidence": [], "evidense": []})


def test_every_shipped_playbook_that_relaunches_the_trainer_states_what_it_acts_on():
    missing = [p.name for p in load_set([], True)[0]
               if RELAUNCHING & {a.verb for a in p.actions} and not p.acts_on]
    assert missing == []
