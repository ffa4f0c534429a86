"""docs/run-log.md entries read as short post-mortems (engine/records/run_log_entry.py + the default template):
only actions that ran, no impossible values, honest outcome words, evidence, cost, lesson, links,
and repeats of one signature as a reference. Records are built as the engine writes them."""

from __future__ import annotations

from pathlib import Path

from engine.records.incident import ActionRecord, Incident
from engine.records.run_log import append_entry, entry_marker, render_entry
from engine.records.signature import signature_of

RUN_LOG = Path("/proj/docs/run-log.md")
CONFIG = {"run_dir": "runs/pretrain", "run_log": "docs/run-log.md"}
TAIL = ["Epoch 1 | iter 48 step 24 | loss train: 5.812", "Traceback (most recent call last):",
        '  File "/opt/train.py", line 9, in fit', "ShardHeaderCorrupted: shard 0x7f3a index 17 in /d/t.bin has a bad header"]


def incident(number: int = 1, playbook: str = "unknown-crash", outcome: str = "escalated", *, alive=False, tail=TAIL,
             actions=(), **fields) -> dict:
    snapshot = {"trainer": {"alive": alive, "exit_code": None if alive else 1}, "metrics": {"step": 24}, "tail": list(tail)}
    record = Incident(schema_version=3, id=f"incident-{number}", playbook=playbook, outcome=outcome, step_at_failure=24,
                      opened_at_iso="2026-11-30T10:00:00+00:00", snapshot=snapshot, signature=signature_of(snapshot),
                      symptom="The trainer exited with an error no more specific playbook recognised.",
                      playbook_source=f"/proj/playbooks/{playbook}.yaml:1", config_before=CONFIG,
                      actions=[ActionRecord(index=i, **a) for i, a in enumerate(actions)], **fields)
    return record.to_json()


def test_an_escalated_unknown_failure_reads_as_a_post_mortem():
    text = render_entry(incident(
        actions=[{"verb": "verify_checkpoints", "ok": True, "summary": "all checkpoints verified"},
                 {"verb": "escalate", "ok": True, "summary": "escalated: no playbook knows this failure"}],
        escalation_reason="the trainer exited with code 1 and no playbook knows this failure",
        lesson="An unrecognised crash needs a human."), run_log=RUN_LOG)
    assert "### incident-1 — unknown-crash (escalated to a human)" in text
    assert "**Seen:** 2026-11-30T10:00:00+00:00, at step 24: the trainer exited with code 1." in text
    assert "**Log line:** `ShardHeaderCorrupted: shard 0x7f3a index 17 in /d/t.bin has a bad header`" in text
    assert "`exit 1, ShardHeaderCorrupted: shard <hex> index <n> in <path> has a bad header, while training`" in text
    assert "**Outcome:** escalated to a human: the trainer exited with code 1 and no playbook knows this failure" in text
    assert "**Cost:** the run stopped at step 24 until a person acts" in text
    assert "**Lesson:** An unrecognised crash needs a human." in text
    assert "playbook [unknown-crash](../playbooks/unknown-crash.yaml)" in text
    assert "record [incident-1](../runs/pretrain/incidents/incident-1.json)" in text
    assert "?" not in text.replace("(most recent", "")


def test_skipped_actions_are_not_listed_as_done():
    text = render_entry(incident(playbook="oom", outcome="recovered", resumed_step=20, steps_lost=4, tokens_lost=4096,
                                 recovery_seconds=9.5, first_progress_at=5.0, runbook_seconds=1.5, trainer_restart_seconds=8.0,
                                 actions=[{"verb": "escalate", "ok": True, "skipped": True, "summary": "skipped (if: x is false)"},
                                          {"verb": "set_hyperparameters", "ok": True, "summary": "micro_batch_size 8 -> 4"},
                                          {"verb": "resume", "ok": True, "summary": "relaunched trainer from step 20"}]),
                        run_log=RUN_LOG)
    assert "escalate" not in text and "skipped" not in text
    assert "**Done:** set_hyperparameters (micro_batch_size 8 -> 4); resume (relaunched trainer from step 20)" in text
    assert "**Outcome:** recovered: resumed from step 20, training again" in text
    assert "**Cost:** 4 optimizer step(s) (4,096 tokens) lost; 9.5 s from detection to training again " \
           "(runbook 1.5 s, trainer restart 8.0 s)" in text


def test_a_slowdown_whose_wait_failed_is_not_called_recovered_and_unknowns_are_left_out():
    text = render_entry(incident(playbook="slow-training", outcome="recovered", alive=True, tail=["Epoch 1 | step 30"],
                                 actions=[{"verb": "diagnose_slowness", "ok": True, "summary": "the CPU is shared"},
                                          {"verb": "wait_for", "ok": False, "summary": "timed out after 300 s"}]),
                        run_log=RUN_LOG)
    assert "### incident-1 — slow-training (not fixed)" in text
    assert "**Outcome:** not fixed: wait_for failed (timed out after 300 s); the run went on as it was" in text
    assert "recovered" not in text
    assert "? optimizer" not in text and "optimizer step" not in text     # steps_lost unknown: not printed
    assert "**Log line:** `Epoch 1 | step 30`" in text


def test_a_repeat_of_one_signature_refers_to_the_first_entry(tmp_path):
    run_log = tmp_path / "docs" / "run-log.md"
    first, again = incident(1), incident(5, same_as="incident-1")
    assert append_entry(run_log, first) and append_entry(run_log, again)
    text = run_log.read_text()
    second = text.split(entry_marker("incident-5"))[1]
    assert "**Again:** the same unknown failure as [incident-1](#incident-1)" in second
    assert "**Log line:**" not in second and "**Lesson:**" not in second   # not repeated in full
    assert '<a id="incident-1"></a>' in text
    assert not append_entry(run_log, again)                                 # once per incident, as before


def test_a_record_from_before_signatures_still_renders():
    old = incident()
    del old["signature"], old["same_as"]
    old["schema_version"] = 2
    text = render_entry(old, run_log=RUN_LOG)
    assert "`exit 1, ShardHeaderCorrupted: shard <hex>" in text     # computed from its snapshot


def test_a_repeated_unknown_failure_is_the_same_one_in_the_record_the_run_log_and_slack(tmp_path):
    """A real (toy) run: the trainer raises the same exception of its own twice, with other values; the
    second watch (a person restarted it) records the repeat as "the same unknown failure as" the first."""
    import os
    import subprocess

    from tests.conftest import REPO, RUNBOOK
    from tests.fake_slack import FakeSlack
    from tests.runs.test_toy_trainer import make_toy_project

    project = make_toy_project(tmp_path / "project", step_seconds=0.0)
    (project.root / "markers").mkdir()
    slack = FakeSlack()
    slack.start()
    project.set(trainer={"kind": "python:tests.failing_litgpt.adapter:FailingToyAdapter",
                         "env": {"RUNBOOK_TEST_FAILURES": "3:shard,6:shard",
                                 "RUNBOOK_TEST_FAIL_ONCE_DIR": str(project.root / "markers")}},
                notifications={"slack": {"enabled": True, "base_url": slack.api_base, "channel": "#training",
                                         "bot_token_env": "RB_TEST_TOKEN"}})
    env = {**os.environ, "PYTHONPATH": str(REPO), "RB_TEST_TOKEN": "xoxb-test"}
    try:
        for _ in range(2):   # escalated; a person restarts it; the same failure escalates again
            done = subprocess.run([RUNBOOK, "watch", str(project.config)], capture_output=True, text=True,
                                  timeout=120, env=env, cwd=project.root)
            assert done.returncode == 4, done.stdout + done.stderr
    finally:
        slack.stop()
    first, again = project.incidents()
    assert first["signature"]["id"] == again["signature"]["id"] and first["signature"]["log_line"] != again["signature"]["log_line"]
    assert (first["same_as"], again["same_as"]) == (None, first["id"])
    entry = project.run_log.read_text().split(entry_marker(again["id"]))[1]
    assert f"**Again:** the same unknown failure as [{first['id']}](#{first['id']})" in entry
    opened = [str(r.body) for r in slack.delivered("chat.postMessage") if again["id"] in str(r.body)]
    assert any(f"the same unknown failure as {first['id']}" in body and first["signature"]["id"] in body for body in opened)
