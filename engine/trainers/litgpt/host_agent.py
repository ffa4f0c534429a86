"""One host's part of a several-host trainer (issue 28): started on every host of a SLURM allocation by
the node group's one `srun` (engine/trainers/litgpt/nodes.py), it runs that host's torchrun agent and
tells the watcher about the host's ranks through the shared filesystem only.

    srun --nodes N --ntasks-per-node 1 python -m engine.trainers.litgpt.host_agent \
        --nodes N --nproc-per-node P --endpoint HEAD:PORT --rdzv-id ID -- <rank command>

- node = SLURM_NODEID; it writes `node-<n>.json` (its agent's pid in this host's namespace, and the
  host's name) and, once the agent ended, `node-<n>.exit.json`, as the one-host group does.
- Every RECORD_INTERVAL_S it writes one HostRecord per rank of this host (engine/process/host_records.py):
  the rank's pid and start time, its process status seen here (running / stopped / gone), its last step,
  the time written. The watcher, on another host, judges the rank only by those records and their age.
- Node 0's output (the watcher's host) reaches srun, which writes it to the trainer log; node n's goes to
  `<ranks folder>/node-<n>.log` (each node's local rank 0 prints litgpt's progress).
- Signals (srun forwards what the group gets): SIGTERM/SIGINT/SIGHUP go to the agent (it forwards them
  to its workers, which save on them); SIGUSR1 to this host's ranks; SIGUSR2 kills agent and ranks.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from engine.process.host_records import RECORD_INTERVAL_S, HostRecord, allocation, record_path
from engine.process.nodes import NODE_ENV, NodeExit, NodeStart, exit_path, start_path, told_signal
from engine.process.ranks import RANKS_DIR_ENV, RankExit, RankHeartbeat, process_status, read_folder, write_record
from engine.trainers.litgpt.nodes import agent_argv

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """PURE. (--nodes, --nproc-per-node, --endpoint, --rdzv-id) and the rank's command."""
    usage = ("usage: python -m engine.trainers.litgpt.host_agent --nodes N --nproc-per-node P --endpoint HOST:PORT "
             "--rdzv-id ID -- COMMAND...")
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise SystemExit(usage)
    cut = argv.index("--")
    options = dict(zip(argv[:cut:2], argv[1:cut:2]))
    if set(options) != {"--nodes", "--nproc-per-node", "--endpoint", "--rdzv-id"} or cut % 2:
        raise SystemExit(usage)
    if not (options["--nodes"].isdigit() and options["--nproc-per-node"].isdigit()):
        raise SystemExit(usage)
    return options, argv[cut + 1:]


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


class HostAgent:
    def __init__(self, folder: Path, node: int, options: dict[str, str], command: list[str]):
        self.folder, self.node, self.options, self.command = folder, node, options, command
        self.host = socket.gethostname()
        self.agent: subprocess.Popen | None = None
        self.killing = False

    def start(self) -> None:
        import psutil

        out = None if self.node == 0 else open(self.folder / f"node-{self.node}.log", "ab")
        argv = agent_argv(sys.executable, int(self.options["--nodes"]), int(self.options["--nproc-per-node"]),
                          self.options["--endpoint"], self.options["--rdzv-id"], self.folder, self.command)
        self.agent = subprocess.Popen(argv, env={**os.environ, NODE_ENV: str(self.node)}, stdout=out,
                                      stderr=subprocess.STDOUT if out else None, stdin=subprocess.DEVNULL,
                                      preexec_fn=_die_with_parent)
        if out is not None:
            out.close()
        try:
            started = psutil.Process(self.agent.pid).create_time()
        except psutil.Error:
            started = time.time()
        write_record(start_path(self.folder, self.node), NodeStart(node=self.node, pid=self.agent.pid,
                                                                    started=started, host=self.host))

    def my_ranks(self) -> tuple[dict[int, RankHeartbeat], dict[int, RankExit]]:
        beats, exits = read_folder(self.folder)
        return {r: b for r, b in beats.items() if b.node == self.node}, exits

    def write_records(self) -> None:
        beats, exits = self.my_ranks()
        now = time.time()
        for rank, beat in beats.items():
            status = process_status(beat) or "gone"
            try:
                write_record(record_path(self.folder, rank), HostRecord(
                    host=self.host, node=self.node, rank=rank, pid=beat.pid, started=beat.started, status=status,
                    step=beat.step, exit_code=exits[rank].exit_code if rank in exits else None, time=now,
                    allocation=allocation()))
            except OSError:
                pass

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if sig == signal.SIGUSR2:
            self.kill_all()
        elif sig in FORWARDED:
            if self.agent is not None and self.agent.poll() is None:
                os.kill(self.agent.pid, sig)
        else:
            for beat in self.my_ranks()[0].values():
                if process_status(beat) is not None:
                    _send(beat.pid, sig)

    def kill_all(self) -> None:
        self.killing = True
        if self.agent is not None and self.agent.poll() is None:
            _send(self.agent.pid, signal.SIGKILL)
        for beat in self.my_ranks()[0].values():
            if process_status(beat) is not None:
                _send(beat.pid, signal.SIGKILL)

    def wait(self) -> int:
        assert self.agent is not None
        ranks_done_at = None
        while self.agent.poll() is None:
            self.write_records()
            beats, exits = self.my_ranks()
            if beats and all(r in exits for r in beats):   # torchrun's exit barrier: do not wait ~300 s in it
                ranks_done_at = ranks_done_at or time.monotonic()
                if time.monotonic() - ranks_done_at > 3.0 and not self.killing:
                    self.kill_all()
            time.sleep(RECORD_INTERVAL_S)
        self.write_records()
        code = self.agent.returncode
        tail = "" if self.node == 0 else _tail(self.folder / f"node-{self.node}.log")
        try:
            write_record(exit_path(self.folder, self.node), NodeExit(
                node=self.node, pid=self.agent.pid, exit_code=code, ended=time.time(), requested=self.killing,
                notice=told_signal(tail)))
        except OSError:
            pass
        return 128 - code if code < 0 else code


def _tail(path: Path, size: int = 256 * 1024) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - size))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str]) -> int:
    options, command = parse(argv)
    folder = os.environ.get(RANKS_DIR_ENV)
    if not folder:
        raise SystemExit(f"runbook: {RANKS_DIR_ENV} is not set: the host agent records its ranks there")
    node = int(os.environ.get("SLURM_NODEID", "0"))
    Path(folder).mkdir(parents=True, exist_ok=True)
    agent = HostAgent(Path(folder), node, options, command)
    for sig in (*FORWARDED, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, agent.handle)
    agent.start()
    return agent.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
