"""What a careful user runs under `torchrun --max-restarts N` (or NVIDIA's ft_launcher) without runbook: the
same training script, resumed from the newest complete checkpoint in --out on every (re)start.

    torchrun --standalone --nproc-per-node 2 --max-restarts 3 benchmarks/peers/resume_newest.py SCRIPT ARGS...

With RUNBOOK_BENCH_FT_HEARTBEAT=1 it also sends NVIDIA resiliency-ext's rank heartbeat after every step
(its RankMonitorClient, wrapped around runbook.sdk.progress): ft_launcher's hang detection needs one.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path


def newest(out: Path) -> Path | None:
    steps = sorted((p for p in out.glob("step-*/state.pt") if p.parent.name[5:].isdigit()),
                   key=lambda p: int(p.parent.name[5:]))
    return steps[-1] if steps else None


def main() -> None:
    script, args = sys.argv[1], sys.argv[2:]
    out = Path(args[args.index("--out") + 1])
    found = newest(out)
    if found is not None and "--resume" not in args:
        args += ["--resume", str(found)]
    if os.environ.get("RUNBOOK_BENCH_FT_HEARTBEAT") == "1":
        from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

        from runbook import sdk

        client = RankMonitorClient()
        client.init_workload_monitoring()
        progress = sdk.progress

        def progress_and_beat(step, loss):
            progress(step, loss)
            client.send_heartbeat()

        sdk.progress = progress_and_beat
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
