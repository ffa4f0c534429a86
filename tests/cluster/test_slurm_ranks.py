"""Several ranks inside a real SLURM job (tests/slurm_cluster.py starts a one-host cluster): the job's
step is `runbook watch`, which starts both ranks of its node itself (DDP over gloo on the CPU). Inside
a job Lightning would take SLURM's one task for the world and train a single rank. The run is undisturbed:
it ends at the budget's counts with no incident (the 2-rank run no other test trains undisturbed)."""

from __future__ import annotations

import stat

from engine.process.ranks import read_folder
from tests.conftest import RUNBOOK, make_project
from tests.slurm_cluster import start_cluster, stop_cluster

JOB_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=runbook-ranks
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={cpus}
#SBATCH --output={root}/job.out
cd {root}
echo "job $SLURM_JOB_ID: $SLURM_NTASKS task(s)"
exec {runbook} watch configs/run_config.yaml
"""
# 20 480 tokens: 20 optimizer steps, each 2 ranks x 2 micro-batches x 4 sequences x 64 tokens
STEPS = 20


def test_two_ranks_train_inside_a_slurm_job(tmp_path, tmp_path_factory, shared_data):
    import os

    cluster = start_cluster(tmp_path_factory.mktemp("slurm-ranks"))
    try:
        project = make_project(tmp_path / "project", shared_data, max_tokens=STEPS * 16 * 64,
                               trainer={"devices": 2})
        script = project.root / "ranks.sbatch"
        script.write_text(JOB_SCRIPT.format(root=project.root, runbook=RUNBOOK, cpus=os.cpu_count() or 1))
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        job_id = cluster.sbatch(script, cwd=project.root)
        job = cluster.wait_job(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}, timeout=400)
    finally:
        stop_cluster(cluster)
    output = (project.root / "job.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", (job, output)
    assert "1 task(s)" in output
    beats, _ = read_folder(project.run_dir / "launches" / "launch-001" / "ranks")
    assert sorted(beats) == [0, 1] and {b.world_size for b in beats.values()} == {2}, beats
    assert beats[0].pid != beats[1].pid and beats[0].step == beats[1].step == STEPS
    assert all(b.work_seconds and b.work_seconds > 0 for b in beats.values())
    # the budget's counts: 20 steps, 2 micro-batches a rank each
    assert project.final_progress() == {"step_count": STEPS, "iter_num": 2 * STEPS}
    log = (project.run_dir / "logs" / "trainer-001.log").read_text()
    assert "distributed_backend=gloo" in log and "GLOBAL_RANK: 1, MEMBER: 2/2" in log
    assert project.incidents() == []
