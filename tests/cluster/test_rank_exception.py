"""A rank's own words reach its exit record, not only its log: a real gloo collective that loses its peer
under the exit recorder (engine/trainers/litgpt/ranks.py). On two hosts the log of a rank on the other host
comes through srun, over the link that failed; at CI (stop 50) rank 1's bare exit code on h2 read as a rank
that died first (rank-died), not as the cut link it was (collective-timeout)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from engine.process.ranks import RankException, RankHeartbeat, exception_path, ranks_status, read_exception, read_folder, write_record

# Rank 0 waits in an all_reduce that rank 1 never joins: gloo's own timeout, a lost peer.
RANK = textwrap.dedent("""
    import os, sys, time
    from datetime import timedelta
    from pathlib import Path
    from engine.trainers.litgpt.ranks import record_own_exception
    import torch, torch.distributed as dist
    rank = int(os.environ["RANK"])
    record_own_exception(Path(sys.argv[1]), rank)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=2))
    if rank == 0:
        dist.all_reduce(torch.ones(4))
    else:
        time.sleep(6)
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_that_lost_its_peer_records_it_in_its_exit(tmp_path: Path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "GLOO_SOCKET_IFNAME": "lo",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, "-m", "engine.trainers.litgpt.ranks", "--record-exit", str(folder), "--",
                               sys.executable, "-c", RANK, str(folder)],
                              env={**os.environ, **env, "RANK": str(rank)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert procs[0].returncode == 1 and procs[1].returncode == 0, outputs
    _, exits = read_folder(folder)
    error = exits[0].error
    assert error is not None and "Timed out waiting 2000ms for recv" in error, (exits, outputs)
    assert error.splitlines()[0] in outputs[0]          # the same words the log got, the first line of them
    assert exits[1].error is None                       # a clean exit carries no words
    beats = {r: RankHeartbeat(rank=r, world_size=2, pid=exits[r].pid, started=0.0, step=0, iter_num=0, time=0.0)
             for r in (0, 1)}
    status = ranks_status(beats, exits, {0: None, 1: None}, exits[0].ended + 1)
    assert (status.first_failed, status.first_failed_cause) == (0, "peer-loss"), status


def test_the_exit_takes_only_that_process_words(tmp_path: Path):
    write_record(exception_path(tmp_path, 1), RankException(rank=1, pid=41, error="RuntimeError: Connection closed by peer"))
    assert read_exception(tmp_path, 1, 41) == "RuntimeError: Connection closed by peer"
    assert read_exception(tmp_path, 1, 42) is None       # an earlier process's words are not this one's
    assert read_exception(tmp_path, 0, 41) is None
    exception_path(tmp_path, 2).write_bytes(b"{" * 100_000)
    assert read_exception(tmp_path, 2, 41) is None       # a bad file is no words
