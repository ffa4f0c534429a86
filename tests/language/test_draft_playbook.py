"""Teaching runbook a new failure, end to end on real runs of the toy trainer (tests/failing_litgpt/: the toy
under a wrapper that raises an exception of its own after step N, a failure no shipped playbook knows):

run A: a preemption (recovered), then the unknown failure: escalated;
`runbook playbooks draft` writes a playbook into playbooks/drafts/ and checks it;
moved into playbooks/, `runbook replay --all` over run A changes only the drafted incident's decision;
run B (a new project with the accepted playbook): the same failure is recovered by it, the run completes;
run C: a different unknown failure gets a different signature and still escalates.

The subject is the engine's (signatures, drafting, replay, the ledger): a trainer's Python exception is
the same to it from any trainer, so the toy stands in for litgpt (whose own crash lines are
tests/litgpt/'s subject).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from engine.observe.events import Progress
from tests.conftest import REPO, RUNBOOK, make_toy_project, stop_process, wait_for
from tests.toy_trainer.adapter import ToyAdapter

# Real `runbook watch` runs of the toy trainer (tens of seconds in all): the slow tier, with the other scenarios.
pytestmark = pytest.mark.slow

KIND = "python:tests.failing_litgpt.adapter:FailingToyAdapter"
FAIL_AFTER = 12                 # a checkpoint every 10 steps: step 10 is there to resume from
# Paced so that the test's SIGTERM, sent once step 2 is logged, lands seconds before the failure at step 12.
STEP_SECONDS = 0.3


def failing_project(root: Path, failures: str):
    """A short toy run (20 steps, a checkpoint every 10) whose trainer fails as `failures` says (wrapper.py)."""
    project = make_toy_project(root, step_seconds=STEP_SECONDS, save_interval=10, max_tokens=20 * 16 * 64)
    (root / "markers").mkdir()
    project.set(trainer={"kind": KIND, "env": {"RUNBOOK_TEST_FAILURES": failures,
                                               "RUNBOOK_TEST_FAIL_ONCE_DIR": str(root / "markers")}})
    return project


def runbook(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, *args], capture_output=True, text=True, timeout=120, cwd=project.root,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def progress_step(project) -> int:
    logs = sorted((project.run_dir / "logs").glob("trainer-*.log"))
    lines = logs[-1].read_text(errors="replace").splitlines() if logs else []
    events = map(ToyAdapter().parse_line, lines)
    return max((e.step for e in events if isinstance(e, Progress)), default=0)


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    """Preempted at step >= 2 (recovered), then the unknown failure at step 12: escalated (exit 4)."""
    project = failing_project(tmp_path_factory.mktemp("draft-a") / "project", f"{FAIL_AFTER}:shard")
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        wait_for(lambda: progress_step(project) >= 2, 120, what="step 2")
        os.kill(project.trainer_pid(), signal.SIGTERM)
        assert watcher.wait(timeout=300) == 4, project.watch_output()
    finally:
        stop_process(watcher)
    return project


@pytest.fixture(scope="module")
def drafted(run_a):
    records = run_a.incidents()
    escalated = next(r for r in records if r["outcome"] == "escalated")
    done = runbook(run_a, "playbooks", "draft", escalated["id"], str(run_a.config))
    return {"records": records, "escalated": escalated, "result": done}


def test_the_unknown_failure_escalates_with_its_signature(run_a):
    preempted, escalated = run_a.incidents()[:2]
    assert (preempted["playbook"], preempted["outcome"]) == ("preemption", "recovered")
    assert (escalated["playbook"], escalated["outcome"]) == ("unknown-crash", "escalated")
    sig = escalated["signature"]
    assert sig["exception"].endswith("ShardHeaderCorrupted") and sig["ending"] == "exit 1"
    assert sig["message"] == "shard <hex> index <n> in <path> has a bad header after step <n>"
    assert escalated["schema_version"] == 3 and escalated["same_as"] is None
    entry = run_a.run_log.read_text()
    assert f"`{sig['id']}`" in entry and "ShardHeaderCorrupted: shard 0x" in entry   # the evidence line, as printed


def test_draft_writes_a_complete_playbook_that_passes_its_checks(run_a, drafted):
    done = drafted["result"]
    assert done.returncode == 0, done.stdout + done.stderr
    path = run_a.root / "playbooks" / "drafts" / "shard-header-corrupted.yaml"
    assert f"-> {path}" in done.stdout
    from engine.language.loader import load_playbook_file

    playbook = load_playbook_file(path)
    assert playbook.lesson and playbook.description and playbook.inhibits == ["unknown-crash"]
    assert [a.verb for a in playbook.actions] == ["verify_checkpoints", "resume", "record"]
    assert playbook.limits.max_attempts == 1
    names = [t.name for t in playbook.tests]
    assert names[0].startswith(f"fires on {drafted['escalated']['id']}")
    assert any(n.startswith(f"does not fire on {drafted['records'][0]['id']} (preemption") for n in names)
    assert "tests: 2 passed, 0 failed" in done.stdout
    assert "the other playbooks' tests with the draft added: " in done.stdout and " passed, 0 failed" in done.stdout
    assert "1 decision(s) would change (1 of this failure, 0 other)" in done.stdout
    assert "safe default" in done.stdout


def test_the_draft_passes_playbooks_lint_of_its_own_file(run_a, drafted):
    """QA: `playbooks lint FILE` of a draft said "inhibits: unknown playbook 'unknown-crash'" (the file linted alone)."""
    path = run_a.root / "playbooks" / "drafts" / "shard-header-corrupted.yaml"
    lint = runbook(run_a, "playbooks", "lint", str(path))
    assert lint.returncode == 0 and "1 playbook(s) valid" in lint.stdout, lint.stdout + lint.stderr


def test_draft_refuses_a_recovered_or_missing_incident(run_a, drafted):
    recovered = runbook(run_a, "playbooks", "draft", drafted["records"][0]["id"], str(run_a.config))
    assert recovered.returncode == 14 and "was recovered by 'preemption'" in recovered.stderr
    assert len(recovered.stderr.strip().splitlines()) == 1
    missing = runbook(run_a, "playbooks", "draft", "incident-999", str(run_a.config))
    assert missing.returncode == 9 and "there is no incident-999" in missing.stderr
    again = runbook(run_a, "playbooks", "draft", drafted["escalated"]["id"], str(run_a.config))
    assert again.returncode == 14 and "already exists" in again.stderr


@pytest.fixture(scope="module")
def accepted(run_a, drafted):
    draft = run_a.root / "playbooks" / "drafts" / "shard-header-corrupted.yaml"
    target = run_a.root / "playbooks" / "shard-header-corrupted.yaml"
    shutil.copy(draft, target)
    return target


def test_accepted_draft_changes_only_its_own_incident_on_replay(run_a, drafted, accepted):
    done = runbook(run_a, "replay", "--all", "--json", str(run_a.config))
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    changed = {r["id"]: r for r in results if r["changed"]}
    assert set(changed) == {drafted["escalated"]["id"]}, done.stdout
    now = changed[drafted["escalated"]["id"]]["now"]
    assert (now["decision"], now["playbook"]) == ("recover", "shard-header-corrupted")
    assert len(results) == len(drafted["records"])


@pytest.fixture(scope="module")
def run_b(run_a, accepted, tmp_path_factory):
    """A new project with the accepted playbook: the same failure at step 12, then another one, at step 16."""
    project = failing_project(tmp_path_factory.mktemp("draft-b") / "project", f"{FAIL_AFTER}:shard,16:tokenizer")
    (project.root / "playbooks").mkdir()
    shutil.copy(accepted, project.root / "playbooks")
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        assert watcher.wait(timeout=300) == 4, project.watch_output()
    finally:
        stop_process(watcher)
    return project


def test_the_same_failure_in_a_new_run_is_recovered_by_the_accepted_playbook(run_b, drafted):
    recovered = run_b.incidents()[0]
    assert (recovered["playbook"], recovered["outcome"]) == ("shard-header-corrupted", "recovered")
    assert recovered["resumed_step"] == 10 and recovered["steps_lost"] == FAIL_AFTER - 10
    assert recovered["first_progress_at"] is not None                                   # training again
    # The same failure in another run, with other numbers, paths and addresses: one signature.
    assert recovered["signature"]["id"] == drafted["escalated"]["signature"]["id"]
    assert recovered["signature"]["log_line"] != drafted["escalated"]["signature"]["log_line"]


def test_a_different_unknown_failure_has_another_signature_and_still_escalates(run_b, drafted):
    other = run_b.incidents()[1]
    assert (other["playbook"], other["outcome"]) == ("unknown-crash", "escalated")
    assert other["signature"]["exception"].endswith("TokenizerVocabDrift")
    assert other["signature"]["id"] != drafted["escalated"]["signature"]["id"]
    assert other["same_as"] is None


def test_the_ledger_counts_both_runs_by_class_and_signature(run_a, run_b, drafted, tmp_path):
    done = runbook(run_a, "ledger", str(run_a.run_dir), str(run_b.run_dir), "-o", str(tmp_path / "ledger"), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    shard = next(r for r in data["by_signature"] if r["key"] == drafted["escalated"]["signature"]["id"])
    assert shard["count"] == 2 and shard["escalations"] == 1 and shard["handled_by"] == ["shard-header-corrupted"]
    assert shard["steps_lost"] == FAIL_AFTER - 10
    by_class = {r["key"]: r for r in data["by_class"]}
    assert by_class["unknown-crash"]["count"] == 2 and by_class["preemption"]["count"] == 1
