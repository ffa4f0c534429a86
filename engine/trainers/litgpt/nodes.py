"""Several nodes (trainer.num_nodes > 1): one torchrun agent per node, c10d rendezvous, started and
reaped by this node group, the trainer process the watcher launches (issue 15).

    python -m engine.trainers.litgpt.nodes --nodes N --nproc-per-node P -- <entry argv>

Here every agent runs on this host (127.0.0.1): the tests' 2 "nodes", and the shape a SLURM job
gives with `srun` starting one agent per node (docs/nodes.md). Measured with torch 2.13 (FINDINGS.md):
- torchrun starts each worker in a session of its own: signalling an agent's process group misses
  its workers, so a stop kills every rank by its heartbeat's pid (engine/process/ranks.py) as well.
- A leftover agent on the same port and rendezvous id breaks the next launch: every launch gets a
  free port and a fresh rendezvous id.
- A SIGKILLed agent orphans its worker and the surviving agent waits ~300 s in its exit barrier:
  nothing here waits for that; the watcher's node-died playbook stops the whole group at once.
- Both nodes' local rank 0 print litgpt's progress (with their local loss): only node 0's agent
  writes to the trainer log; node n's goes to `<ranks folder>/node-<n>.log`.

Each agent runs its worker under `engine.trainers.litgpt.ranks --record-exit`, which records the
rank's exit; this process records each agent's (engine/process/nodes.py). Signals: SIGTERM/SIGINT/SIGHUP (a
notice) go to every agent, which forwards them to its workers (they save on it, notice_save.py);
SIGUSR1 goes to every rank directly (torchrun does not handle it and would die of it); SIGUSR2
(runbook's stop without a save) kills every agent and rank. The exit is rank 0's (128+N for a
signal), as with one node where rank 0 is the trainer process.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import IO

from engine.process.host_records import (LOST_PEER, STALE_S, allocation, lost_hosts, lost_in_allocation, peer_verdict,
                                         previous_launch_folder, read_host_records)
from engine.process.nodes import NODE_ENV, NodeExit, NodeStart, exit_path, start_path, told_signal
from engine.process.ranks import RANKS_DIR_ENV, process_status, read_folder, write_record

GROUP_MODULE = "engine.trainers.litgpt.nodes"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LINGER_S = 3.0       # agents still there this long after every rank ended (exit barrier, teardown) are killed


def group_argv(python: str, num_nodes: int, nproc_per_node: int) -> list[str]:
    """PURE. The node group's command; the rank's own command follows it."""
    return [python, "-m", GROUP_MODULE, "--nodes", str(num_nodes), "--nproc-per-node", str(nproc_per_node), "--"]


def agent_argv(python: str, num_nodes: int, nproc_per_node: int, endpoint: str, rdzv_id: str, folder: Path,
               command: list[str]) -> list[str]:
    """PURE. One node's torchrun agent (c10d rendezvous, no restarts of its own: the watcher restarts the
    whole group from a verified checkpoint), its worker wrapped by the exit recorder."""
    return [python, "-m", "torch.distributed.run", f"--nnodes={num_nodes}", f"--nproc-per-node={nproc_per_node}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}", "--max-restarts=0",
            "--no-python", python, "-m", "engine.trainers.litgpt.ranks", "--record-exit", str(folder), "--", *command]


SRUN_MODULE = "engine.trainers.litgpt.host_agent"


def across_hosts(environ: Mapping[str, str], num_nodes: int) -> bool:
    """PURE. Inside a SLURM allocation of at least num_nodes hosts (num_nodes > 1): one agent per host,
    started by `srun` (issue 28); elsewhere every agent runs on this host."""
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "1"
    return num_nodes > 1 and bool(environ.get("SLURM_JOB_ID")) and nodes.isdigit() and int(nodes) >= num_nodes


def srun_argv(python: str, num_nodes: int, nproc_per_node: int, endpoint: str, rdzv_id: str,
              command: list[str]) -> list[str]:
    """PURE. One `srun` step with one task per host, each the host's agent wrapper (host_agent.py), which
    runs that host's torchrun agent and writes its ranks' records; a failed task does not kill the step's
    other tasks (the watcher decides)."""
    return ["srun", f"--nodes={num_nodes}", f"--ntasks={num_nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
            "--export=ALL", python, "-m", SRUN_MODULE, "--nodes", str(num_nodes), "--nproc-per-node",
            str(nproc_per_node), "--endpoint", endpoint, "--rdzv-id", rdzv_id, "--", *command]


def group_exit_code(rank0_code: int | None, agent_codes: list[int]) -> int:
    """PURE. Rank 0's exit (128+N for signal N); without one, 0 when every agent succeeded, else 1."""
    if rank0_code is not None:
        return 128 - rank0_code if rank0_code < 0 else rank0_code
    return 0 if agent_codes and all(code == 0 for code in agent_codes) else 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:   # a killed node group takes its agents along (not their workers: own sessions)
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


class NodeGroup:
    def __init__(self, folder: Path, num_nodes: int, nproc_per_node: int, command: list[str]):
        self.folder, self.num_nodes, self.nproc, self.command = folder, num_nodes, nproc_per_node, command
        self.agents: dict[int, subprocess.Popen] = {}
        self.codes: dict[int, int] = {}
        self.killing = False
        self.forwarded = False   # a notice came through this group (the watcher's): no node was told alone
        self.srun: subprocess.Popen | None = None   # across hosts: the one srun step of every host's agent
        self.waiting_for_slurm = False
        self.lock = threading.Lock()
        self.delayed: list[bytes] = []
        self.delayed_since: float | None = None
        self.released = False

    def start(self) -> None:
        import psutil

        if across_hosts(os.environ, self.num_nodes):
            return self.start_srun()
        endpoint, rdzv_id = f"127.0.0.1:{free_port()}", uuid.uuid4().hex
        print(f"runbook: {self.num_nodes} nodes x {self.nproc} ranks, torchrun c10d rendezvous {rdzv_id} at {endpoint}", flush=True)
        for node in range(self.num_nodes):
            env = {**os.environ, NODE_ENV: str(node)}
            out = None if node == 0 else open(self.folder / f"node-{node}.log", "ab")
            argv = agent_argv(sys.executable, self.num_nodes, self.nproc, endpoint, rdzv_id, self.folder, self.command)
            agent = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                     stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
            if out is not None:
                out.close()
            self.agents[node] = agent
            try:
                started = psutil.Process(agent.pid).create_time()
            except psutil.Error:
                started = time.time()
            write_record(start_path(self.folder, node), NodeStart(node=node, pid=agent.pid, started=started,
                                                                   host=socket.gethostname()))

    def start_srun(self) -> None:
        """Across hosts: the rendezvous on this host (the allocation's first, where the watcher runs). A host
        lost in the launch before, in this same allocation, would fail this one's start: wait for SLURM to
        call its node down and end the allocation (it requeues the job), saying so every few seconds."""
        previous = previous_launch_folder(self.folder)
        lost = lost_in_allocation(read_host_records(previous), socket.gethostname(), time.time(), allocation()) \
            if previous else {}
        if lost:
            self.waiting_for_slurm = True
            while True:
                print(f"runbook: host(s) {', '.join(sorted(lost.values()))} of job {os.environ.get('SLURM_JOB_ID')} "
                      "were lost in the previous launch: not starting on them; waiting for SLURM to end this "
                      "allocation (node failure) and requeue the job", flush=True)
                time.sleep(5)
        endpoint, rdzv_id = f"{socket.gethostname()}:{free_port()}", uuid.uuid4().hex
        print(f"runbook: {self.num_nodes} hosts x {self.nproc} ranks through srun (job {os.environ.get('SLURM_JOB_ID')}), "
              f"torchrun c10d rendezvous {rdzv_id} at {endpoint}", flush=True)
        self.srun = subprocess.Popen(srun_argv(sys.executable, self.num_nodes, self.nproc, endpoint, rdzv_id, self.command),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)
        threading.Thread(target=self.relay, args=(self.srun.stdout,), daemon=True).start()

    def relay(self, pipe: IO[bytes]) -> None:
        """srun's output (node 0's agent: the trainer log) line by line. A line saying a peer went away is
        delayed, with what follows it, until the other hosts' records tell a dead peer process (they are
        renewed: the line goes on to the watcher, a collective's lost peer) from a lost host (none renewed
        for STALE_S: the watcher sees the dead node first), so that the watcher never takes a lost host
        for a collective timeout."""
        for line in iter(pipe.readline, b""):
            with self.lock:
                if self.delayed_since is None and not self.released and LOST_PEER.search(line):
                    self.delayed_since = time.time()
                if self.delayed_since is not None:
                    self.delayed.append(line)
                    continue
            _write(line)

    def release_delayed(self, verdict_of: Callable[[float], str | None]) -> None:
        srun = self.srun
        assert srun is not None   # only wait_srun() releases, once srun runs
        with self.lock:
            if self.delayed_since is None:
                return
            verdict = verdict_of(self.delayed_since)
            if verdict is None and time.time() - self.delayed_since < STALE_S + 2.0 and srun.poll() is None:
                return
            print(f"runbook: delayed {len(self.delayed)} line(s) after a lost peer for {time.time() - self.delayed_since:.1f} s: "
                  f"{'a host is lost' if verdict == 'lost' else 'every host renewed its records' if verdict else 'no verdict'}",
                  flush=True)
            for line in self.delayed:
                _write(line)
            self.delayed, self.delayed_since, self.released = [], None, True

    def wait_srun(self) -> int:
        """Until srun ends. A host none of whose records was renewed for STALE_S is lost: once this host's
        ranks ended too, srun (which would wait for SLURM to call that node down) is killed. So is an srun
        still there LINGER_S after every rank ended."""
        srun = self.srun
        assert srun is not None   # start() ran srun: this group spans hosts
        ranks_done_at = lost_at = stop_at = None
        killed = False
        host = socket.gethostname()
        while srun.poll() is None:
            self.release_delayed(lambda since: peer_verdict(read_host_records(self.folder), host, since, time.time()))
            if self._every_rank_ended():
                ranks_done_at = ranks_done_at or time.monotonic()
            lost = lost_hosts(read_host_records(self.folder), host, time.time(), current=allocation())
            if lost and lost_at is None:
                lost_at = time.monotonic()
                print(f"runbook: host(s) {', '.join(sorted(lost.values()))} lost: no record renewed", flush=True)
            if self.killing and stop_at is None:
                stop_at = time.monotonic()
            # every rank ended: each host's wrapper kills its own lingering agent after LINGER_S and records
            # its exit, so srun is given twice that (killing srun first cost node 0's exit record, seen)
            due = [t for t in (ranks_done_at and ranks_done_at + LINGER_S, lost_at, stop_at) if t is not None]
            if due and time.monotonic() - min(due) > LINGER_S and not killed:
                killed = self.killing = True
                _send(srun.pid, signal.SIGKILL)
            time.sleep(0.1)
        time.sleep(0.2)   # the relay's last lines
        self.release_delayed(lambda since: "ended")
        _, exits = read_folder(self.folder)
        code = srun.returncode
        return group_exit_code(exits[0].exit_code if 0 in exits else None, [code] if code is not None else [])

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if self.waiting_for_slurm:   # nothing started, nothing to save
            os._exit(128 + sig.value)
        if self.srun is not None:   # srun forwards signals to every host's agent wrapper (SIGINT would only make it print)
            if sig == signal.SIGUSR2:
                self.killing = True
            _send(self.srun.pid, signal.SIGTERM if sig == signal.SIGINT else sig)
            return
        if sig == signal.SIGUSR2:
            self.kill_all()
        elif sig in FORWARDED:
            self.forwarded = True
            for agent in self.live():
                _send(agent.pid, sig)
        else:   # SIGUSR1: straight to the ranks
            for beat in read_folder(self.folder)[0].values():
                if process_status(beat) is not None:
                    _send(beat.pid, sig)

    def live(self) -> list[subprocess.Popen]:
        return [a for n, a in self.agents.items() if n not in self.codes]

    def kill_all(self) -> None:
        """Every agent and every rank (their own sessions), at once: a stop without a save."""
        self.killing = True
        for agent in self.live():
            _send(agent.pid, signal.SIGKILL)
        for beat in read_folder(self.folder)[0].values():
            if process_status(beat) is not None:
                _send(beat.pid, signal.SIGKILL)

    def wait(self) -> int:
        if self.srun is not None:
            return self.wait_srun()
        ranks_done_at = None
        while len(self.codes) < len(self.agents):
            for node, agent in self.agents.items():
                if node not in self.codes and agent.poll() is not None:
                    self.codes[node] = agent.returncode
                    # an agent killed while lingering may have been told first; a SIGKILL itself logs nothing
                    notice = None if self.forwarded else told_signal(self._log_tail(node))
                    _record(self.folder, NodeExit(node=node, pid=agent.pid, exit_code=agent.returncode,
                                                  ended=time.time(), requested=self.killing, notice=notice))
            if self._every_rank_ended():
                ranks_done_at = ranks_done_at or time.monotonic()
                if time.monotonic() - ranks_done_at > LINGER_S and not self.killing:
                    print(f"runbook: every rank ended; {len(self.live())} agent(s) still waiting after "
                          f"{LINGER_S:g} s (an exit barrier): killed", flush=True)
                    self.kill_all()
            time.sleep(0.05)
        _, exits = read_folder(self.folder)
        return group_exit_code(exits[0].exit_code if 0 in exits else None, list(self.codes.values()))

    def _log_tail(self, node: int, size: int = 256 * 1024) -> str:
        """The end of that agent's output: node 0's is this group's stdout (the trainer log)."""
        path = self.folder / f"node-{node}.log" if node else Path(os.readlink("/proc/self/fd/1"))
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, fh.seek(0, os.SEEK_END) - size))
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def _every_rank_ended(self) -> bool:
        beats, exits = read_folder(self.folder)
        world = max((b.world_size for b in beats.values()), default=0)
        return world > 0 and all(rank in exits for rank in range(world))


def _write(line: bytes) -> None:
    try:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    except (OSError, ValueError):
        pass


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _record(folder: Path, record: NodeExit) -> None:
    try:
        write_record(exit_path(folder, record.node), record)
    except OSError:
        pass   # a full disk: the watcher then sees the agent gone without its exit


def parse(argv: list[str]) -> tuple[int, int, list[str]]:
    """PURE. (nodes, ranks per node, the rank's command); SystemExit with a usage line otherwise."""
    usage = "usage: python -m engine.trainers.litgpt.nodes --nodes N --nproc-per-node P -- COMMAND..."
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise SystemExit(usage)
    cut = argv.index("--")
    options = dict(zip(argv[:cut:2], argv[1:cut:2]))
    try:
        nodes, nproc = int(options["--nodes"]), int(options["--nproc-per-node"])
    except (KeyError, ValueError):
        raise SystemExit(usage) from None
    if nodes < 1 or nproc < 1 or set(options) != {"--nodes", "--nproc-per-node"}:
        raise SystemExit(usage)
    return nodes, nproc, argv[cut + 1:]


def main(argv: list[str]) -> int:
    nodes, nproc, command = parse(argv)
    folder = os.environ.get(RANKS_DIR_ENV)
    if not folder:
        raise SystemExit(f"runbook: {RANKS_DIR_ENV} is not set: the node group records its agents there")
    Path(folder).mkdir(parents=True, exist_ok=True)
    group = NodeGroup(Path(folder), nodes, nproc, command)
    for sig in (*FORWARDED, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, group.handle)
    group.start()
    return group.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
