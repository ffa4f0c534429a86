"""A real two-host SLURM cluster on this machine, for the tests (issue 28). Scripts: tests/cluster/hosts/.

Each host is a network + PID + UTS + mount namespace sharing the filesystem (like NFS); a bridge of
the cluster's own (`rbmhbr0`, 10.214.7.254/24) joins one veth per host; no default route, a private
/etc/hosts (h0, h1, h2) and an empty resolv.conf bind-mounted in each host's own mount namespace, so no
packet or name lookup leaves 10.214.7.0/24. The machine's own links, addresses and /etc are not touched.

- h0 (10.214.7.1): slurmctld, MariaDB (Debian's, on h0's own 127.0.0.1:3306) and slurmdbd, so that
  `sacct` answers; h1 (.11) and h2 (.12): one `slurmd -N hN` each. The root namespace is the login
  node (pytest, sbatch, sacct run there, through hosts/login.sh). munge: a munged of the cluster's own
  (own key and socket, in the root namespace). Clients of slurmdbd always use munge's default socket
  (measured: sacctmgr ignores AuthInfo=socket=), so each host, and each client command through
  login.sh, bind-mounts the cluster's socket folder over /run/munge in a mount namespace of its own:
  the machine's munged, which other sessions start and stop, is neither used nor touched.
- Installed with apt-get as the single-host cluster is (slurm-wlm, munge, slurmdbd, mariadb-server);
  skipped, saying why, without root or apt-get (CI runs as root with apt-get).
- Start and stop are measured (`start_seconds`, `phases`, `stop_seconds`). Stop kills every host's PID 1,
  so the kernel kills every process of it (daemons, steps, tasks), then deletes the veths, namespaces
  and bridge; it runs on any failure of the start too, and before the start (leftovers of a killed
  session). One cluster at a time on the machine: a lock file, held from start to stop.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.slurm_cluster import _ensure_installed

HOSTS_DIR = Path(__file__).resolve().parent / "cluster" / "hosts"
PREFIX = "rbmh"
NET = "10.214.7"
LOCK = Path("/run/lock/runbook-two-hosts.lock")
COMPUTE = ("h1", "h2")
PACKAGES = ("slurm-wlm", "munge", "slurmdbd", "mariadb-server")
PROGRAMS = ("sbatch", "slurmctld", "slurmd", "munged", "slurmdbd", "mariadbd", "mariadb-install-db", "nsenter",
            "unshare", "ip")


class TwoHosts:
    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "etc" / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "MH": str(root), "P": PREFIX, "NET": NET}
        self.start_seconds = self.stop_seconds = 0.0
        self.phases: dict[str, float] = {}
        self._lock = None

    def script(self, name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([str(HOSTS_DIR / name), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def run(self, *argv: str, timeout: float = 60, cwd=None) -> subprocess.CompletedProcess:
        """A client command on the login node (the root namespace): sbatch, scontrol, sacct, runbook..."""
        return subprocess.run([str(HOSTS_DIR / "login.sh"), *argv], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=cwd)

    def on(self, host: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a command on host h0/h1/h2 (its namespaces)."""
        return self.script("on.sh", host, *argv, timeout=timeout)

    def kill_host(self, host: str) -> None:
        """Power the host off: every process of it dies at once (SIGKILL by the kernel)."""
        done = self.script("host-kill.sh", host)
        assert done.returncode == 0, done.stderr

    def boot_host(self, host: str) -> None:
        done = self.script("host-boot.sh", host)
        assert done.returncode == 0, done.stderr

    def link(self, host: str, up: bool) -> None:
        """Cut (or mend) the host's only link, at the bridge's end."""
        done = subprocess.run(["ip", "link", "set", f"{PREFIX}-{host}", "up" if up else "down"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    def host_pids(self, host: str) -> list[int]:
        """Root-namespace pids of every process on the host (its PID namespace)."""
        init = (self.root / "run" / f"{host}.init").read_text().strip()
        ns = os.readlink(f"/proc/{init}/ns/pid")
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                        pids.append(int(entry))
                except OSError:
                    pass
        return pids

    def nodes(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def job(self, job_id) -> dict[str, str]:
        fields = {}
        for part in self.run("scontrol", "show", "job", "-o", str(job_id)).stdout.split():
            key, _, value = part.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_job(self, job_id, states: set[str], timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} not in {states} after {timeout:g} s: {self.job(job_id)}\n{self.log_tail()}")

    def sacct(self, job_id, *fields: str) -> str:
        return self.run("sacct", "-j", str(job_id), "--duplicates", "--parsable2", "--noheader",
                        f"--format={','.join(fields)}").stdout

    def log_tail(self, lines: int = 15) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)


def start_two_hosts() -> TwoHosts:
    """The cluster's folder is a fresh /tmp/runbook-two-hosts-*, 0755 with every parent (munged refuses a
    socket under a folder others cannot enter, as pytest's 0700 temp folders are); removed by the stop."""
    _ensure_installed(PROGRAMS, PACKAGES)
    if os.geteuid() != 0:
        pytest.skip("namespaces, a bridge and slurmd need root (CI runs as root)")
    root = Path(tempfile.mkdtemp(prefix="runbook-two-hosts-", dir="/tmp"))
    root.chmod(0o755)
    cluster = TwoHosts(root)
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    cluster._lock = open(LOCK, "w")
    fcntl.flock(cluster._lock, fcntl.LOCK_EX)   # another session's cluster: wait for its stop
    started = time.monotonic()
    try:
        cluster.script("cluster-down.sh")          # a killed session's leftovers (same prefix)
        done = cluster.script("cluster-up.sh", timeout=180)
        for line in done.stderr.splitlines():
            words = line.split()
            if len(words) == 4 and words[0] == "phase":
                cluster.phases[words[1]] = int(words[2]) / 1000
        if done.returncode != 0:
            raise AssertionError(f"the two-host cluster did not start:\n{done.stderr}\n{cluster.log_tail()}")
    except BaseException:
        stop_two_hosts(cluster)
        raise
    cluster.start_seconds = time.monotonic() - started
    return cluster


def stop_two_hosts(cluster: TwoHosts) -> None:
    started = time.monotonic()
    try:
        if (cluster.root / "run" / "h0.init").exists():
            jobs = cluster.run("squeue", "-h", "-o", "%i", timeout=30).stdout.split()
            if jobs:   # a cancelled job's watcher stops without a requeue (its processes die with the hosts anyway)
                cluster.run("scancel", *jobs, timeout=30)
    except (subprocess.TimeoutExpired, OSError):
        pass
    finally:
        cluster.script("cluster-down.sh", timeout=120)
        shutil.rmtree(cluster.root, ignore_errors=True)
        cluster.stop_seconds = time.monotonic() - started
        if cluster._lock is not None:
            cluster._lock.close()
            cluster._lock = None


def leftovers() -> list[str]:
    """What of a cluster of this prefix is still on the machine (namespaces, links)."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [line.split()[0] for line in netns.splitlines() if line.startswith(f"{PREFIX}-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [line.split(":")[1].strip().split("@")[0] for line in links.splitlines() if f" {PREFIX}" in line]
    return found


def installed() -> bool:
    return all(shutil.which(p) for p in PROGRAMS)
