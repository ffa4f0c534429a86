"""Several real hosts (issue 28): the two-host SLURM cluster of tests/two_hosts.py, and runbook on it.

The cluster: h0 (slurmctld, slurmdbd on MariaDB), h1 and h2 (one slurmd each), each host its own
network, PID, UTS and mount namespace on a private bridge; the filesystem shared. The tests here check
the cluster is what it claims (separate hosts, SLURM across them, sacct answering) and that its stop
leaves nothing behind.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from engine.process.host_records import read_host_records
from engine.process.nodes import read_nodes
from engine.process.ranks import read_folder
from tests.conftest import RUNBOOK, make_project
from tests.two_hosts import PREFIX, leftovers, start_two_hosts, stop_two_hosts

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


@pytest.fixture(scope="module")
def hosts():
    cluster = start_two_hosts()
    print(f"\ntwo hosts up in {cluster.start_seconds:.2f} s: {cluster.phases}")
    yield cluster
    stop_two_hosts(cluster)
    print(f"\ntwo hosts down in {cluster.stop_seconds:.2f} s")


def test_each_host_has_its_own_name_network_and_processes(hosts):
    names = {h: hosts.on(h, "hostname").stdout.strip() for h in ("h0", "h1", "h2")}
    assert names == {"h0": "h0", "h1": "h1", "h2": "h2"}
    assert subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip() not in names.values()
    addresses = hosts.on("h1", "ip", "-o", "-4", "addr", "show").stdout
    assert "10.214.7.11/24" in addresses and "10.214.7.12" not in addresses
    assert hosts.on("h1", "ip", "route").stdout.split() == ["10.214.7.0/24", "dev", "eth0", "proto", "kernel",
                                                             "scope", "link", "src", "10.214.7.11"]
    # h2's slurmd is invisible from h1 (its root-namespace pid does not exist there) and names resolve
    # through the private /etc/hosts
    slurmd_h2 = [p for p in hosts.host_pids("h2") if open(f"/proc/{p}/comm").read().strip() == "slurmd"]
    assert len(slurmd_h2) == 1 and slurmd_h2[0] not in hosts.host_pids("h1")
    seen_from_h1 = hosts.on("h1", "ps", "-e", "-o", "pid=,comm=").stdout.split("\n")
    assert [line.split()[1] for line in seen_from_h1 if line.strip()].count("slurmd") == 1, seen_from_h1
    assert not [line for line in seen_from_h1 if "slurmctld" in line or "mariadbd" in line], seen_from_h1
    assert "10.214.7.12" in hosts.on("h1", "getent", "hosts", "h2").stdout
    assert hosts.nodes() == {"h1": "idle", "h2": "idle"}


def test_a_two_node_job_runs_one_task_per_host_and_sacct_reports_it(hosts, tmp_path):
    out = tmp_path / "job.out"
    done = hosts.run("sbatch", "--parsable", "-N2", "--ntasks-per-node=1", f"--output={out}", "--wrap",
                     "srun bash -c 'echo task $SLURM_PROCID on $(hostname)'")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    job = hosts.wait_job(job_id, FINISHED, timeout=60)
    assert job["JobState"] == "COMPLETED", job
    assert sorted(out.read_text().split("\n")[:2]) == ["task 0 on h1", "task 1 on h2"], out.read_text()
    deadline = time.monotonic() + 30   # slurmctld sends the job's end to slurmdbd on its own time
    rows = []
    while time.monotonic() < deadline:
        rows = hosts.sacct(job_id, "JobID", "State", "NodeList", "ExitCode").split()
        if rows and rows[0].split("|")[1] == "COMPLETED":
            break
        time.sleep(0.5)
    assert rows[0].startswith(f"{job_id}|COMPLETED|") and f"{job_id}.0|COMPLETED|h[1-2]|0:0" in rows, rows


# --- runbook across the two hosts --------------------------------------------------------------------

# 10 240 tokens = 10 optimizer steps of 16 sequences x 64 tokens (2 ranks x 2 micro-batches x 4 sequences)
TWO_NODES = {"max_tokens": 10240, "save_interval": 2}
STEPS, ITERS = 10, 20
NOISE = ("rank-straggler", "slow-training")   # a loaded 2-core machine slows one rank for real
TRAINER = {"devices": 1, "num_nodes": 2,
           "env": {"RUNBOOK_COLLECTIVE_TIMEOUT_S": "60", "GLOO_SOCKET_IFNAME": "eth0"}}


def ranks_dir(project, launch: int) -> Path:
    return project.run_dir / "launches" / f"launch-{launch:03d}" / "ranks"


def submit(hosts, project) -> str:
    done = hosts.run(RUNBOOK, "slurm", "submit", str(project.config), "--nodes=2", cwd=project.root)
    assert done.returncode == 0 and done.stdout.strip().isdigit(), done.stdout + done.stderr
    return done.stdout.strip()


def job_output(project, job_id: str) -> str:
    path = project.run_dir / "slurm" / f"job-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else "(no job output)"


@pytest.fixture(scope="module")
def undisturbed(hosts, tmp_path_factory, shared_data):
    project = make_project(tmp_path_factory.mktemp("two-host-run") / "project", shared_data, **TWO_NODES)
    project.set(trainer=TRAINER)
    started = time.monotonic()
    job_id = submit(hosts, project)
    job = hosts.wait_job(job_id, FINISHED, timeout=300)
    return {"project": project, "job_id": job_id, "job": job, "seconds": time.monotonic() - started}


def test_an_undisturbed_run_trains_one_rank_per_host_to_the_budgets_counts(undisturbed):
    project, job = undisturbed["project"], undisturbed["job"]
    output = job_output(project, undisturbed["job_id"])
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", (job, output, project.watch_output())
    progress = project.final_progress()
    assert (progress["step_count"], progress["iter_num"]) == (STEPS, ITERS), progress
    beats, exits = read_folder(ranks_dir(project, 1))
    assert {r: (b.host, b.node, b.step) for r, b in beats.items()} == {0: ("h1", 0, STEPS), 1: ("h2", 1, STEPS)}
    assert {r: e.exit_code for r, e in exits.items()} == {0: 0, 1: 0}
    starts, ends = read_nodes(ranks_dir(project, 1))
    assert {n: s.host for n, s in starts.items()} == {0: "h1", 1: "h2"}
    # an agent still in torchrun's exit barrier 3 s after its ranks ended is killed by its host's wrapper
    assert all(e.exit_code == 0 or (e.exit_code == -9 and e.requested) for e in ends.values()) and sorted(ends) == [0, 1]
    records = read_host_records(ranks_dir(project, 1))
    assert {r: (rec.host, rec.state, rec.step) for r, rec in records.items()} == {0: ("h1", "gone", STEPS), 1: ("h2", "gone", STEPS)}
    assert records[1].pid == beats[1].pid and records[1].started == beats[1].started
    log = (project.run_dir / "logs" / "trainer-001.log").read_text()
    assert "2 hosts x 1 ranks through srun" in log and log.count("| iter 2 step 1 |") == 1   # h2's progress: its own log
    assert [i["playbook"] for i in project.incidents() if i["playbook"] not in NOISE] == []
    print(f"\nundisturbed two-host run: {undisturbed['seconds']:.1f} s from submit to COMPLETED")


def test_the_stop_leaves_no_namespace_link_or_process(hosts):
    inits = [int((hosts.root / "run" / f"{h}.init").read_text()) for h in ("h0", "h1", "h2")]
    munged = int((hosts.root / "munge" / "munged.pid").read_text())
    host_pids = [p for h in ("h0", "h1", "h2") for p in hosts.host_pids(h)]
    assert len(host_pids) >= 8   # 3 inits, slurmctld, slurmdbd, mariadbd, 2 slurmd (and their children)
    stop_two_hosts(hosts)
    assert leftovers() == []
    alive = [p for p in host_pids + inits + [munged] if os.path.exists(f"/proc/{p}") and
             not open(f"/proc/{p}/stat").read().split(") ")[1].startswith("Z")]
    assert alive == [], alive
    assert f"{PREFIX}br0" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert hosts.stop_seconds < 10, hosts.stop_seconds
    assert not hosts.root.exists()
