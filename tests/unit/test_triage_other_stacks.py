"""`runbook triage` on a paste of another stack's run (engine/observe/other_stacks.py through triage's Observer):
the verdict and the plan are the ones `runbook watch --dry-run` makes of the same log and exit.

Lines: HF Trainer's logged dicts, the last three verbatim from tests/field/corpus hf_trainer.yaml
(hf-trainer-vicuna-lora-rlhf-11-loss-inf-then-nan: 240023.775, inf, nan), the earlier ones in the same format;
a Megatron/DeepSpeed iteration line verbatim from nemo.yaml (NVIDIA-NeMo/Megatron-Bridge#3427), its iteration
number counted on.
"""

from __future__ import annotations

import json
import math

from typer.testing import CliRunner

from engine.core.events import DryRunPlan, PlannedStepView
from runbook.cli import app

HF_NAN = [f"{{'loss': {2.5 - 0.01 * i:.4f}, 'grad_norm': 0.91, 'learning_rate': 5e-05, 'epoch': {i / 100:.2f}}}" for i in range(8)] + [
    "{'loss': 240023.775, 'learning_rate': 0.0002762320648783531, 'epoch': 0.47}",
    "{'loss': inf, 'learning_rate': 0.0002743605739238927, 'epoch': 0.49}",
    "{'loss': nan, 'learning_rate': 0.00027248908296943227, 'epoch': 0.51}",
]
NEMO = ("[2026-04-20 03:17:07] iteration       {n}/      50 | consumed samples:        25600 | elapsed time per iteration (ms): "
        "9969.4 | learning rate: 4.500000E-06 | global batch size:   512 | lm loss: 4.791878E-03 | seq_load_balancing_loss: "
        "9.546359E-01 | load_balancing_loss: 0.000000E+00 | mtp_1 loss: 4.700819E-03 | mtp_2 loss: 4.768143E-03 | loss scale: "
        "1.0 | grad norm: 0.022 | number of skipped iterations:   0 | number of nan iterations:   0 |")
DS_STOPS = [NEMO.format(n=n) for n in range(40, 51)]


def triage_json(tmp_path, lines: list[str], *args: str) -> dict:
    log = tmp_path / "pasted.log"
    log.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, ["triage", str(log), *args, "--json"])
    return json.loads(result.output)


def test_a_pasted_hf_log_ending_in_nan_is_nan(tmp_path):
    data = triage_json(tmp_path, HF_NAN)   # no exit given: the NaN is in the parsed loss, whatever the ending
    assert data["playbook"] == "nan" and data["verdict"] == "recover", data
    assert math.isnan(data["metrics"]["loss"])
    # HF's dicts print no step: none is made up from a count of lines (a rollback bound in the wrong unit)
    assert data["metrics"]["step"] is None and data["metrics"]["last_healthy_step"] is None


def test_a_pasted_deepspeed_iteration_log_that_stops_reads_its_step_and_loss(tmp_path):
    data = triage_json(tmp_path, DS_STOPS)
    assert (data["metrics"]["step"], data["metrics"]["loss"]) == (50, 4.791878e-03), data["metrics"]
    notes = " ".join(data["missing"])
    assert "no progress line recognised" not in notes
    assert "a stall (hang) is judged on a running process, never on a log" in notes   # a stop is the watcher's to see
    assert data["playbook"] == "unknown-exit", data   # gone, how unknown: what the watcher does with an exit nobody saw


def _dry_run(tmp_path, text: str, code: int, sig: str | None):
    """`runbook watch --dry-run`'s own code on a run folder holding the log and the exit (as tests/unit/test_triage.py)."""
    from engine.language.playbook_set import load_run_playbooks
    from engine.trainers import adapter_for
    from engine.trainers.run_config import load_config
    from engine.watch.supervisor import Supervisor

    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    config = project / "configs" / "run_config.yaml"
    config.write_text("micro_batch_size: 8\nbatch_size: 16\ndata:\n  make_default: false\n")
    loaded = load_config(config)
    log = loaded.run_dir / "logs" / "trainer-001.log"
    log.parent.mkdir(parents=True)
    log.write_text(text)
    entries = [
        {"time": 1.0, "kind": "launch", "launch": 1, "pid": 999999, "log": str(log), "resume_from": None, "argv": []},
        {"time": 1.1, "kind": "transition", "from": "starting", "to": "running", "reason": "launch 1"},
        {"time": 5.0, "kind": "trainer_exited", "pid": 999999, "exit_code": code, "signal": sig},
    ]
    loaded.folder.journal.write_text("".join(json.dumps(e) + "\n" for e in entries))
    playbooks = load_run_playbooks(loaded, adapter_for(loaded.config.trainer.kind))
    events = []

    class NoNotices:
        def close(self):
            pass

    Supervisor(loaded, playbooks, NoNotices(), "sha256:" + "0" * 64, dry_run=True,
               events=events.append).run()
    planned = [event for event in events if isinstance(event, DryRunPlan)]
    assert len(planned) == 1, events
    return loaded, playbooks, log, (planned[0].playbook, list(planned[0].steps))


def test_triage_and_the_dry_run_agree_on_other_stacks_logs(tmp_path):
    from engine.trainers import adapter_for
    from engine.watch.triage import ending, triage

    for n, (lines, code, sig, expected) in enumerate([(HF_NAN, 1, None, "nan"), (DS_STOPS, -9, "SIGKILL", "killed")]):
        loaded, playbooks, log, watched = _dry_run(tmp_path / str(n), "\n".join(lines) + "\n", code, sig)
        end = ending(signal_arg=sig) if sig else ending(exit_code=code)
        judged = triage(log, end, loaded.config, playbooks, adapter_for(loaded.config.trainer.kind))
        assert judged.decision.playbook.name == expected
        assert (judged.decision.playbook.name, [PlannedStepView.of(s) for s in judged.steps]) == watched
