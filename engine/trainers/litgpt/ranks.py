"""Several ranks of litgpt pretraining, prepared inside every rank (entry.py calls `prepare()` after
importing litgpt.pretrain and before litgpt builds its Fabric).

- On a CPU, litgpt 0.5.13 picks FSDP whenever devices x num_nodes > 1 and FSDP refuses the CPU.
  `litgpt.pretrain.FSDPStrategy` is replaced by a class whose instances are Lightning's DDPStrategy
  over gloo (a class, not a function: litgpt also uses the name in an isinstance check, which a DDP
  strategy then fails, so litgpt initialises the weights as it does on one device). On a GPU
  litgpt's FSDP over NCCL stays.
- Inside a SLURM job, SLURM_NTASKS is hidden from Lightning, which would otherwise take the job's
  single task for the whole world and start no other rank.
- TORCH_DISTRIBUTED_DEBUG=DETAIL is lowered to INFO on a CPU: with gloo it kills every rank (SIGSEGV).
- RUNBOOK_COLLECTIVE_TIMEOUT_S sets the process group's collective timeout (gloo's default is 30
  minutes: a rank waiting for a stopped one would block that long).
- With RUNBOOK_RANKS_DIR set (engine/process/ranks.py, by the watcher), every rank writes its heartbeat
  there from inside litgpt's loop: at the top of each micro-batch (phase "work") and as it enters
  the backward, whose gradient all-reduce waits for the other ranks (phase "sync"). Its own work
  per micro-batch, the straggler measure, runs from the top of the micro-batch to the moment its
  gradients are ready for the all-reduce (a DDP communication hook notes it): the all-reduce makes
  every rank's step time the same, so step time alone could not name the slow one.
- Lightning starts the other ranks of the node from rank 0; each runs under a small recording parent
  (`record_exit_main`) that writes its exit code (a signal as negative) the moment it ends, with the
  exception the rank recorded as it ended (`record_own_exception`): its lost peer or its own error.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping, MutableMapping
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from engine.process.nodes import NODE_ENV
from engine.process.ranks import (RANKS_DIR_ENV, RankException, RankExit, RankHeartbeat, exception_path, exit_path,
                                  heartbeat_path, read_exception, write_record)

if TYPE_CHECKING:
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import DDPStrategy

COLLECTIVE_TIMEOUT_ENV = "RUNBOOK_COLLECTIVE_TIMEOUT_S"
MAX_ERROR_CHARS = 500     # an exception's message can be megabytes (a tensor's repr)
WORK_WINDOW = 10          # micro-batches in a rank's work-time median


def prepare(environ: MutableMapping[str, str] = os.environ) -> None:
    import litgpt.pretrain as pretrain

    timeout = _collective_timeout(environ)
    if not _cuda_available():
        pretrain.FSDPStrategy = cpu_strategy_class(timeout)
        if environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
            # Measured with torch 2.13: DETAIL (the hang playbooks' debugging) makes DDP over gloo die of
            # SIGSEGV before the first step, in every rank; INFO works. Read at process-group start.
            environ["TORCH_DISTRIBUTED_DEBUG"] = "INFO"
            import torch.distributed

            torch.distributed.set_debug_level_from_env()   # torch read DETAIL at import
            print("runbook: TORCH_DISTRIBUTED_DEBUG=DETAIL crashes DDP over gloo (torch 2.13); using INFO", flush=True)
    folder = environ.get(RANKS_DIR_ENV)
    if folder and "SLURM_NTASKS" in environ:
        # Inside a SLURM job Lightning takes SLURM's tasks for the ranks and starts none itself: a
        # `--ntasks=1` job with devices 2 silently trained one rank (measured). runbook starts the ranks
        # of its node itself (never through srun), so the job's task count is not theirs.
        environ.pop("SLURM_NTASKS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        Heartbeat(Path(folder)).attach(pretrain)
        record_own_exception(Path(folder), _rank(environ))
        _record_child_exits(Path(folder))


def _rank(environ: Mapping[str, str]) -> int:
    # torchrun sets RANK (several nodes); Lightning starts ranks on one node and sets only LOCAL_RANK (= global)
    return int(environ.get("RANK", environ.get("LOCAL_RANK", "0")))


def record_own_exception(folder: Path, rank: int) -> None:
    """An uncaught exception is written to the ranks folder before its traceback is printed: a rank on another
    host prints through srun, whose link may be the thing that failed (a cut link: the rank's "Timed out
    waiting 8000ms for recv" never reached the log, and its bare exit code read as a rank that died first)."""
    previous = sys.excepthook
    pid = os.getpid()

    def on_exception(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if os.getpid() == pid and not issubclass(kind, (SystemExit, KeyboardInterrupt)):
            text = f"{kind.__name__}: {value}".splitlines()[0] if str(value) else kind.__name__
            try:
                write_record(exception_path(folder, rank), RankException(rank=rank, pid=pid, error=text[:MAX_ERROR_CHARS]))
            except OSError:
                pass   # a full disk: the exit is still recorded, without its words
        previous(kind, value, tb)

    sys.excepthook = on_exception


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _collective_timeout(environ: Mapping[str, str]) -> timedelta | None:
    text = environ.get(COLLECTIVE_TIMEOUT_ENV)
    if not text:
        return None
    seconds = float(text)
    if not seconds > 0:
        raise SystemExit(f"runbook: {COLLECTIVE_TIMEOUT_ENV}={text!r} must be a number of seconds > 0")
    return timedelta(seconds=seconds)


def cpu_strategy_class(timeout: timedelta | None) -> type:
    """What litgpt's FSDPStrategy(...) call builds on a CPU: DDP over gloo, with the collective timeout."""
    from lightning.fabric.strategies import DDPStrategy

    class CpuDDPInsteadOfFSDP:
        def __new__(cls, *args: object, **kwargs: object) -> DDPStrategy:  # type: ignore[misc]  # another class's instance, on purpose   # litgpt's FSDP arguments (wrap policy, sharding) have no DDP meaning
            extra: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
            return DDPStrategy(process_group_backend="gloo", **extra)

    return CpuDDPInsteadOfFSDP


class Heartbeat:
    """This rank's heartbeat file, written from litgpt's loop."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.fit_dict: dict | None = None
        self.rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.node = int(os.environ[NODE_ENV]) if os.environ.get(NODE_ENV, "").isdigit() else None
        self.started = _create_time()
        self.host = socket.gethostname()
        self.work: deque[float] = deque(maxlen=WORK_WINDOW)
        self.work_started: float | None = None
        self.synced_at: float | None = None     # when this rank's last gradient bucket was ready

    def beat(self, phase: str) -> None:
        fit_dict = self.fit_dict or {}
        try:
            write_record(heartbeat_path(self.folder, self.rank), RankHeartbeat(
                rank=self.rank, world_size=self.world_size, node=self.node, pid=os.getpid(), started=self.started,
                step=fit_dict.get("step_count"), iter_num=fit_dict.get("iter_num"), phase=phase, time=time.time(),
                work_seconds=round(statistics.median(self.work), 4) if self.work else None, host=self.host))
        except OSError:
            pass   # a full disk must not stop training; the watcher then sees an old heartbeat

    def attach(self, pretrain: ModuleType) -> None:
        import lightning.fabric as fabric_module

        heartbeat, original_fit = self, pretrain.fit
        base_iterator: type = pretrain.CycleIterator   # litgpt's class, subclassed below
        original_backward = fabric_module.Fabric.backward

        def fit(*args: Any, **kwargs: Any) -> object:   # litgpt's fit arguments: its Fabric, state dict, ...
            fabric = kwargs.get("fabric", args[0] if args else None)
            heartbeat.fit_dict = kwargs.get("state", args[2] if len(args) > 2 else None)
            if fabric is not None:
                heartbeat.rank, heartbeat.world_size = fabric.global_rank, fabric.world_size
            heartbeat.watch_gradient_sync((heartbeat.fit_dict or {}).get("model"))
            heartbeat.beat("work")
            return original_fit(*args, **kwargs)

        class HeartbeatCycleIterator(base_iterator):
            def __next__(self) -> object:
                item = super().__next__()
                heartbeat.work_started = time.monotonic()
                heartbeat.beat("work")
                return item

        def backward(fabric_self: Fabric, *args: Any, **kwargs: Any) -> object:
            heartbeat.synced_at = None
            heartbeat.beat("sync")
            result = original_backward(fabric_self, *args, **kwargs)
            if heartbeat.work_started is not None:
                # Its own work ends where its gradients are ready for the all-reduce (the last bucket's
                # hook); a micro-batch without one (gradient accumulation) waits for nobody.
                ended = heartbeat.synced_at or time.monotonic()
                heartbeat.work.append(ended - heartbeat.work_started)
                heartbeat.work_started = None
            return result

        setattr(pretrain, "fit", fit)
        setattr(pretrain, "CycleIterator", HeartbeatCycleIterator)
        setattr(fabric_module.Fabric, "backward", backward)   # a patch of lightning's method, not an override


    def watch_gradient_sync(self, model: object) -> None:
        """A DDP communication hook that notes when this rank's gradients are ready (then does what DDP
        does by default: average them over the ranks with an all-reduce)."""
        from torch.nn.parallel import DistributedDataParallel

        ddp = getattr(model, "_forward_module", None)
        if not isinstance(ddp, DistributedDataParallel):
            return
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        # Unannotated on purpose: register_comm_hook compares a hook's annotations with torch's classes at run time,
        # and under `from __future__ import annotations` they would be strings, refused (every rank died).
        def hook(state, bucket):  # type: ignore[no-untyped-def]
            self.synced_at = time.monotonic()
            return default_hooks.allreduce_hook(state, bucket)

        ddp.register_comm_hook(state=None, hook=hook)


def _create_time() -> float:
    import psutil

    return psutil.Process().create_time()


def _record_child_exits(folder: Path) -> None:
    """In the rank that starts the others (Lightning's launcher in local rank 0): each rank it starts runs
    under `python -m engine.trainers.litgpt.ranks --record-exit FOLDER -- <Lightning's command>`, a small
    parent that waits for the rank and writes its exit. Not a thread in rank 0: when a rank dies, rank 0
    often dies of the broken process group before a thread of its own gets to run."""
    from lightning.fabric.strategies.launchers import subprocess_script

    original = subprocess_script._basic_subprocess_cmd

    def command() -> list[str]:
        return [sys.executable, "-m", __name__, "--record-exit", str(folder), "--", *original()]

    subprocess_script._basic_subprocess_cmd = command


NOTED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _die_with_parent() -> None:   # in the rank, between fork and exec: a killed recorder takes its rank along
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


def record_exit_main(argv: list[str]) -> int:
    """Parent of one rank: start it, wait, write rank-<n>.exit.json, exit as it did (128+N for signal N,
    so Lightning's observer in rank 0 sees the failure). Signals that reach this process are the
    rank's too (its process group's), so they are only noted, as engine/process/launcher.py does."""
    folder, command = Path(argv[1]), argv[3:]
    for sig in NOTED_SIGNALS:
        signal.signal(sig, lambda *_: None)
    rank = _rank(os.environ)
    child = subprocess.Popen(command, preexec_fn=_die_with_parent)
    code = child.wait()
    try:
        error = read_exception(folder, rank, child.pid) if code != 0 else None
        write_record(exit_path(folder, rank), RankExit(rank=rank, pid=child.pid, exit_code=code, ended=time.time(),
                                                       error=error))
    except OSError:
        pass
    return 128 - code if code < 0 else code


if __name__ == "__main__" and sys.argv[1:2] == ["--record-exit"]:
    sys.exit(record_exit_main(sys.argv[1:]))
