"""Save on notice with 2 ranks (engine/trainers/litgpt/notice_save.py; DDP over gloo on the CPU, as in
tests/cluster/test_ranks.py): a notice that reaches rank 1 alone (SIGUSR1, the scheduler's early notice) is agreed
by both ranks at the next optimizer-step boundary (an all_reduce of the flag), the step is saved once, both
ranks exit 75, and the preemption playbook resumes to the budget's exact step_count and iter_num."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from engine.process.ranks import read_folder
from engine.trainers.litgpt.notice_save import NOTICE_EXIT_CODE
from engine.trainers.litgpt.resume import read_progress
from tests.conftest import make_project, stop_process, wait_for

STEPS = 24                 # 24 optimizer steps of 16 x 64 tokens; each rank runs 2 micro-batches of 4 per step
SAVE_INTERVAL = 12         # the scheduled saves (12, 24) are never the notice's step (see below)
PROGRESS_STEP = re.compile(r"^Epoch \d+ \| iter (\d+) step (\d+) \|", re.M)


def rank_step(project, rank: int) -> int:
    beats, _ = read_folder(project.run_dir / "launches" / "launch-001" / "ranks")
    beat = beats.get(rank)
    return beat.step if beat is not None and beat.step is not None else -1


@pytest.fixture(scope="module")
def noticed(tmp_path_factory, shared_data) -> dict:
    project = make_project(tmp_path_factory.mktemp("notice-ranks") / "project", shared_data,
                           max_tokens=STEPS * 16 * 64, save_interval=SAVE_INTERVAL)
    # a collective timeout, so a rank left waiting by a broken agreement fails in seconds, not gloo's 30 min
    project.set(trainer={"devices": 2, "env": {"RUNBOOK_COLLECTIVE_TIMEOUT_S": "60"}})
    watcher = project.watch()
    found: dict = {"project": project}
    try:
        # Rank 1 is stopped between step 2 and step 9, given the notice, and continued: the flag is its
        # own until the next boundary's all_reduce, so rank 0 saves only if the agreement works.
        wait_for(lambda: rank_step(project, 1) >= 2, 240, interval=0.01, what="rank 1 past step 2")
        beats, _ = read_folder(project.run_dir / "launches" / "launch-001" / "ranks")
        found["rank1_pid"], found["rank0_pid"] = beats[1].pid, beats[0].pid
        os.kill(found["rank1_pid"], signal.SIGSTOP)
        time.sleep(0.1)
        found["stopped_at_step"] = rank_step(project, 1)
        os.kill(found["rank1_pid"], signal.SIGUSR1)
        os.kill(found["rank1_pid"], signal.SIGCONT)
        found["rc"] = watcher.wait(timeout=400)
    finally:
        stop_process(watcher)
        for pid in (found.get("rank1_pid"), found.get("rank0_pid")):
            try:
                os.kill(pid, signal.SIGCONT) if pid else None
            except ProcessLookupError:
                pass
    return found


def test_a_notice_to_one_rank_is_agreed_saved_once_and_every_rank_exits_75(noticed):
    project = noticed["project"]
    assert noticed["rc"] == 0, project.watch_output()
    assert noticed["stopped_at_step"] < SAVE_INTERVAL - 1, "the run outran the test: the notice met a scheduled save"
    launch1 = project.run_dir / "launches" / "launch-001"
    status = json.loads((launch1 / "exit-status.json").read_text())
    assert status["exit_code"] == NOTICE_EXIT_CODE, status   # rank 0, which never got a signal itself
    _, exits = read_folder(launch1 / "ranks")
    assert exits[1].exit_code == NOTICE_EXIT_CODE, exits     # rank 1 saved with it, then exited 75

    log1 = (project.run_dir / "logs" / "trainer-001.log").read_text()
    saved = [int(s) for s in re.findall(r"runbook: notice save of step (\d+) complete", log1)]
    assert len(saved) == 1, log1[-3000:]                      # one save, announced once (rank 0)
    step = saved[0]
    assert step in (noticed["stopped_at_step"], noticed["stopped_at_step"] + 1), (step, noticed["stopped_at_step"])
    assert "runbook: SIGUSR1 received" in log1
    # Both ranks stopped at the same step boundary: the saved state is that step, and each rank's last
    # heartbeat (written in the step's last micro-batch, before the step count moved on) is at its iter_num.
    assert read_progress(project.step_dir(step) / "lit_model.pth") == {"step_count": step, "iter_num": 2 * step}
    beats, _ = read_folder(launch1 / "ranks")
    assert beats[0].iter_num == beats[1].iter_num == 2 * step, (beats[0], beats[1])
    assert max(int(s) for _, s in PROGRESS_STEP.findall(log1)) == step
    assert not list(project.out_dir.rglob("notice-save-*")) and not list(project.out_dir.rglob("*.staging"))


def test_the_group_resumes_from_the_notice_save_to_the_budget_with_no_step_lost(noticed):
    project = noticed["project"]
    assert noticed["rc"] == 0, project.watch_output()
    incidents = project.incidents()
    assert [i["playbook"] for i in incidents] == ["preemption"], incidents
    step = incidents[0]["resumed_step"]
    assert incidents[0]["outcome"] == "recovered" and incidents[0]["steps_lost"] == 0, incidents[0]
    log2 = (project.run_dir / "logs" / "trainer-002.log").read_text()
    assert f"Resuming training from {project.step_dir(step) / 'lit_model.pth'}" in log2
    resumed = [(int(i), int(s)) for i, s in PROGRESS_STEP.findall(log2)]
    assert resumed[0] == (2 * step + 2, step + 1), resumed[:3]   # the next step, nothing computed twice
    # The budget exactly: 24 optimizer steps, 48 micro-batches per rank, as an undisturbed run.
    assert project.final_progress() == {"step_count": STEPS, "iter_num": 2 * STEPS}
