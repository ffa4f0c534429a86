"""A real single-host SLURM cluster for the tests: Debian's slurm-wlm 22.05 and munge, started here.

How it starts (measured in ../shared/FINDINGS.md, "Measured here: a single-host SLURM"):
1. `apt-get install slurm-wlm munge` when `sbatch` is missing (as root; ~17 s, the only network use:
   Debian's package registry). Not root, or no apt-get: the tests that need it are skipped, saying why.
2. munged, as the munge user, unless one answers already (the package makes the key).
3. slurmctld and slurmd with a slurm.conf of this cluster's own (SLURM_CONF): this host as controller
   and its only node, no cgroups or systemd (proctrack/linuxproc, task/none), state, spool, logs and
   pid files in a temp folder, and ports of its own so that it never meets another cluster here.
   `AuthInfo=cred_expire=5` makes a requeued job start again after ~10 s, not ~2 min; `KillWait=5`
   sends SIGKILL 5 s after the SIGTERM of a cancel or requeue (default 30 s).
4. Ready when `sinfo` shows the node idle. Stopped by cancelling the jobs left (`scontrol shutdown`
   alone leaves their processes running), `scontrol shutdown`, then SIGTERM to slurmd.

Jobs get the caller's environment (sbatch's --export=ALL), so `runbook` from this venv runs in them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


from tests.conftest import require_capability

SLURM_CONF_TEMPLATE = """\
ClusterName=runbooktest
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=5
MinJobAge=600
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.started_munge = False

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)

    def sbatch(self, script: Path, *options: str, cwd: Path) -> int:
        done = subprocess.run(["sbatch", "--parsable", *options, str(script)], env=self.env, cwd=cwd,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """scontrol's view of a job: JobState, Restarts, ExitCode, ..."""
        done = self.run("scontrol", "show", "job", "-o", str(job_id))
        fields = {}
        for part in done.stdout.split():
            key, _, value = part.partition("=")
            fields[key] = value
        return fields

    def wait_job(self, job_id: int, states: set[str], timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} not in {states} after {timeout:g} s: {self.job(job_id)}\n"
                             + self.log_tail())

    def log_tail(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.root / name
            if path.exists():
                parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ensure_installed(programs=("sbatch", "slurmctld", "munged"), packages=("slurm-wlm", "munge")) -> None:
    if all(shutil.which(program) for program in programs):
        return
    if os.geteuid() != 0:
        require_capability("SLURM is not installed and installing Debian's slurm-wlm needs root (CI runs as root)")
    if not shutil.which("apt-get"):
        require_capability("SLURM is not installed and this machine has no apt-get to install Debian's slurm-wlm")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", *packages]
    if subprocess.run(install, env=env, capture_output=True, timeout=600).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            require_capability(f"could not install Debian's {', '.join(packages)}: {done.stderr.strip()[-300:]}")


def _ensure_munge() -> bool:
    """True when this call started munged (the cluster's stop then stops it too)."""
    if subprocess.run("munge -n | unmunge", shell=True, capture_output=True, timeout=30).returncode == 0:
        return False
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    started = subprocess.run(["runuser", "-u", "munge", "--", "munged"], capture_output=True, text=True, timeout=30)
    if started.returncode != 0:
        require_capability(f"munged (SLURM's authentication) did not start: {started.stderr.strip()}")
    return True


def start_cluster(root: Path) -> SlurmCluster:
    _ensure_installed()
    if os.geteuid() != 0:
        require_capability("slurmd must run as root to start jobs as their user (CI runs as root)")
    started_munge = _ensure_munge()
    for folder in ("state", "spool"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    memory_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
    host = socket.gethostname().split(".")[0]
    cluster = SlurmCluster(root)
    cluster.started_munge = started_munge
    cluster.conf.write_text(SLURM_CONF_TEMPLATE.format(host=host, root=root, cpus=os.cpu_count() or 1,
                                                       memory_mb=memory_mb, ctld_port=_free_port(),
                                                       slurmd_port=_free_port()))
    for daemon in (["slurmctld", "-i"], ["slurmd"]):   # -i: no state from an earlier cluster
        done = cluster.run(*daemon)
        if done.returncode != 0:
            raise AssertionError(f"{daemon[0]} did not start: {done.stderr}\n{cluster.log_tail()}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = cluster.run("sinfo", "-h", "-o", "%T").stdout.strip()
        if state == "idle":
            return cluster
        time.sleep(0.2)
    stop_cluster(cluster)
    raise AssertionError(f"the node did not become idle (sinfo: {state!r})\n{cluster.log_tail()}")


def stop_cluster(cluster: SlurmCluster) -> None:
    # Jobs first: `scontrol shutdown` leaves a running job's slurmstepd and processes behind (seen: a
    # failed test's watcher and trainer kept running). A cancelled job's watcher stops without a requeue.
    jobs = cluster.run("squeue", "-h", "-o", "%i", timeout=30).stdout.split()
    if jobs:
        cluster.run("scancel", *jobs, timeout=30)
        deadline = time.monotonic() + 30
        while cluster.run("squeue", "-h", "-o", "%i", timeout=30).stdout.split() and time.monotonic() < deadline:
            time.sleep(0.5)
    cluster.run("scontrol", "shutdown", timeout=30)
    for pid_file in ("slurmd.pid", "slurmctld.pid"):
        path = cluster.root / pid_file
        try:
            os.kill(int(path.read_text().strip()), 15)
        except (OSError, ValueError):
            pass
    if cluster.started_munge:
        try:
            os.kill(int(Path("/run/munge/munged.pid").read_text().strip()), 15)
        except (OSError, ValueError):
            pass
