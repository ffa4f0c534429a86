"""runbook under a real SLURM scheduler (tests/slurm_cluster.py starts one on this host).

A requeue (what SLURM does to a preempted job, and what `scontrol requeue` does by hand) SIGTERMs
every process of the job: the watcher, and the trainer in its own session. The job runs again as a
new watcher on the same project folder, which resumes from the newest verified checkpoint: the run
ends with the undisturbed run's step and token counts, as one job with Restarts=1.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from tests.conftest import RUNBOOK, make_project, wait_for
from tests.slurm_cluster import start_cluster, stop_cluster


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    yield cluster
    stop_cluster(cluster)


JOB_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=runbook-watch
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={root}/job.out
cd {root}
echo "job $SLURM_JOB_ID start, restart count ${{SLURM_RESTART_COUNT:-0}}"
exec {runbook} watch configs/run_config.yaml
"""


def test_a_requeued_slurm_job_resumes_the_run_to_the_undisturbed_counts(tmp_path, shared_data, slurm):
    project = make_project(tmp_path / "project", shared_data, max_tokens=20480, save_interval=5)   # 20 steps
    script = tmp_path / "project" / "watch.sbatch"
    script.write_text(JOB_SCRIPT.format(root=project.root, runbook=RUNBOOK))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    job_id = slurm.sbatch(script, cwd=project.root)

    wait_for(lambda: (project.step_dir(5) / "model_config.yaml").exists(), 240, what="the first checkpoint")
    first_pid = project.trainer_pid()
    requeued = slurm.run("scontrol", "requeue", str(job_id))
    assert requeued.returncode == 0, requeued.stderr

    job = slurm.wait_job(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}, timeout=400)
    output = (project.root / "job.out").read_text()
    assert job["JobState"] == "COMPLETED" and job.get("Restarts") == "1", (job, output)
    assert "restart count 0" in output and "restart count 1" in output, output
    with pytest.raises(ProcessLookupError):
        os.kill(first_pid, 0)   # the first trainer is gone: SLURM's TERM reached it in its own session

    # What the budget gives undisturbed: 20480 tokens / (16 x 64) = 20 optimizer steps of 4 micro-batches.
    assert project.final_progress() == {"step_count": 20, "iter_num": 80}
    entries = [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines()]
    launches = [e for e in entries if e["kind"] == "launch"]
    assert len(launches) >= 2 and launches[-1]["resume_from"], launches
