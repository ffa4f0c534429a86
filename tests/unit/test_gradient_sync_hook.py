"""The heartbeat's DDP communication hook is one torch accepts: register_comm_hook reads a hook's annotations
at run time and refuses any that are not torch's own classes (strings, under `from __future__ import
annotations`, killed every rank of every multi-rank run). One gloo rank, in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO

PROBE = textwrap.dedent("""
    import socket, sys, types
    from pathlib import Path
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from engine.trainers.litgpt.ranks import Heartbeat

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    ddp = DistributedDataParallel(torch.nn.Linear(4, 1))
    beat = Heartbeat(Path(sys.argv[1]))
    beat.watch_gradient_sync(types.SimpleNamespace(_forward_module=ddp))   # as Fabric wraps the DDP module
    ddp(torch.ones(2, 4)).sum().backward()
    print("synced" if beat.synced_at is not None else "no hook ran")
    dist.destroy_process_group()
""")


def test_the_gradient_sync_hook_is_accepted_by_ddp_and_notes_the_sync(tmp_path):
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "synced"
