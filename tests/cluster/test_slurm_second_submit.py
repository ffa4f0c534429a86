"""`runbook slurm submit`'s refusal of a second job for a run, the pure part (engine/cluster/slurm.py,
live_job_refusal) and the records it reads (engine/cluster/slurm_records.py). The real check, against a running
SLURM, is in tests/cluster/test_slurm_submit.py."""

from __future__ import annotations

import time

from engine.cluster.slurm import JobQuery, job_view, live_job_refusal, parse_show_job
from engine.cluster.slurm_records import Allocation, Submission, recorded_job_ids, write_allocation, write_submission

# `scontrol show job -o` as SLURM 22.05 prints it (cut to the fields read), and its answer for an unknown id
# as engine/cluster/slurm_commands.run_command reports a failed command.
PENDING = ("JobId=12 JobName=runbook-pretrain UserId=root(0) JobState=PENDING Reason=Resources Requeue=1 "
           "Restarts=0 BatchFlag=1 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED NodeList=(null) NumNodes=1")
UNKNOWN = "`scontrol show job -o` failed: slurm_load_jobs error: Invalid job id specified"


def query(line: str) -> JobQuery:
    view = job_view(parse_show_job(line))
    return JobQuery(view.job_id, view.state, line)


def test_a_live_job_of_the_run_is_refused_with_its_id_state_and_the_way_out():
    for state in ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUE_HOLD"):
        refusal, warnings = live_job_refusal([query(PENDING.replace("JobState=PENDING", f"JobState={state}"))])
        assert refusal and f"job 12 of this run is still {state}" in refusal and "scancel 12" in refusal, refusal
        assert warnings == []
    # the live one is named whichever record names it
    ended = query(PENDING.replace("JobId=12", "JobId=11").replace("JobState=PENDING", "JobState=COMPLETED"))
    refusal, _ = live_job_refusal([ended, query(PENDING)])
    assert refusal and "job 12 " in refusal and "job 11" not in refusal, refusal


def test_an_ended_or_forgotten_job_is_no_reason_and_an_unanswered_query_only_warns():
    for state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"):
        assert live_job_refusal([query(PENDING.replace("JobState=PENDING", f"JobState={state}"))]) == (None, [])
    assert live_job_refusal([JobQuery("12", None, UNKNOWN)]) == (None, [])
    assert live_job_refusal([]) == (None, [])   # never submitted
    refusal, warnings = live_job_refusal([JobQuery("12", None, "`scontrol show job -o` did not answer within 20 s")])
    assert refusal is None and warnings == [
        "could not ask SLURM whether job 12 of this run still runs (`scontrol show job -o` did not answer within "
        "20 s); submitting anyway"], warnings


def test_the_job_ids_a_run_folder_names_newest_first(tmp_path):
    run_dir = tmp_path / "run"
    assert recorded_job_ids(run_dir) == []
    now = time.time()
    # a job submitted by hand (sbatch job.sbatch) has allocation records only; then one through runbook
    for job_id, restart, started in (("5", 0, now - 300), ("5", 1, now - 200), ("7", 0, now - 100)):
        write_allocation(run_dir, Allocation(job_id=job_id, restart=restart, node="n1", started_at=started,
                                             watcher_pid=1))
    write_submission(run_dir, Submission(job_id="9", submitted_at=now, script="job.sbatch", argv=["sbatch"]))
    assert recorded_job_ids(run_dir) == ["9", "7", "5"]
    (run_dir / "slurm" / "submission.json").write_text("{not json")   # unreadable: the allocations still count
    assert recorded_job_ids(run_dir) == ["7", "5"]
