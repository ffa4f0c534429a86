"""Why is training slow? PURE: the samples taken from outside (engine/observe/slowness_sampling.py) -> one cause.

The causes are told apart by what each one leaves behind, checked in this order (the first that the
samples show wins, so a cause outside the trainer is never answered with advice about the trainer):

  stopped      the trainer (or one rank) spends its time in state T: SIGSTOP, a freezer, a debugger
  slow_rank    one rank's own work per micro-batch is over STRAGGLER_FACTOR x the other ranks' median
  throttled    the trainer's cgroup hits its CPU quota (cpu.stat nr_throttled / throttled time)
  steal        the hypervisor takes the CPU (steal time)
  contention   other processes take the cores (their pids, commands and CPU shares are named), or the
               kernel's CPU pressure says tasks wait for a CPU while no process this watcher can see takes
               it (another container, the host, a quota above this cgroup)
  storage      iowait, or the trainer blocked in uninterruptible (disk) sleep
  data_loader  the data workers are saturated while the trainer waits for batches
  compute      the trainer has the machine to itself and computes flat out: nothing outside it
  unknown      none of the above
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

STOPPED_FRACTION = 0.1         # of samples in state T
STRAGGLER_FACTOR = 1.5         # a rank's work per micro-batch over this x the other ranks' median
STRAGGLER_MIN_EXCESS_S = 0.05  # ... and at least this much over it: a few ms of scheduling noise is no straggler
THROTTLED_FRACTION = 0.1       # of the sampled wall time spent throttled by the cgroup
STEAL_PERCENT = 10.0
CONTENTION_SHARE = 0.25        # other processes' CPU, as a fraction of all cores
HIDDEN_PRESSURE_PERCENT = 25.0 # PSI cpu some avg10: tasks wait for a CPU this share of the time
BUSY_IDLE_PERCENT = 20.0       # the machine counts as saturated below this idle
IOWAIT_PERCENT = 20.0
DISK_SLEEP_FRACTION = 0.3      # of samples with the trainer in state D
WORKER_SATURATED_PERCENT = 90.0
COMPUTE_BOUND_PERCENT = 90.0


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OtherProcess(Record):
    pid: int
    command: str                # the command line, cut to a readable length
    cpu_percent: float          # of one core, over the sample window


class RankSample(Record):
    rank: int
    pid: int | None = None
    stopped_fraction: float = 0.0
    work_seconds: float | None = None   # median of its own work per micro-batch (data, forward, backward), from its heartbeat


class SlownessSamples(Record):
    cores: int
    sample_seconds: float
    num_workers: int = 0
    trainer_pids: list[int] = Field(default_factory=list)
    trainer_cpu_percent: float = 0.0     # the ranks (or the single trainer process), of one core each
    workers_cpu_percent: float = 0.0     # the rest of the trainer's process tree (data loaders)
    stopped_fraction: float = 0.0        # of samples with the trainer (any rank) in state T
    disk_sleep_fraction: float = 0.0     # of samples with the trainer in state D
    system_idle_percent: float = 100.0
    iowait_percent: float = 0.0
    steal_percent: float = 0.0
    cpu_pressure_some_avg10: float | None = None   # /proc/pressure/cpu, when the kernel has PSI
    others_cpu_percent: float = 0.0
    top_others: list[OtherProcess] = Field(default_factory=list)
    cgroup: str | None = None
    cgroup_quota_cores: float | None = None      # cpu.max / cfs_quota, None when unlimited
    throttled_fraction: float | None = None      # throttled time / sampled wall time
    throttled_periods: int | None = None
    ranks: list[RankSample] = Field(default_factory=list)
    data_read_mb_s: float | None = None


class Verdict(Record):
    cause: str
    sentence: str


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def straggler(ranks: list[RankSample], factor: float = STRAGGLER_FACTOR,
              min_excess_s: float = STRAGGLER_MIN_EXCESS_S) -> tuple[RankSample, float] | None:
    """The slowest rank and the other ranks' median work time, when that rank is over factor x that
    median and over it by at least min_excess_s."""
    timed = sorted(((r.work_seconds, r) for r in ranks if r.work_seconds is not None), key=lambda t: t[0])
    if len(timed) < 2:
        return None
    (slowest_s, slowest), others = timed[-1], [s for s, _ in timed[:-1]]
    median = _median(others)
    over = median > 0 and slowest_s > factor * median and slowest_s - median >= min_excess_s
    return (slowest, median) if over else None


def _named(procs: list[OtherProcess], limit: int = 3) -> str:
    return ", ".join(f"pid {p.pid} `{p.command}` {p.cpu_percent:.0f}%" for p in procs[:limit])


def verdict(e: SlownessSamples) -> Verdict:
    """The most likely cause, in one sentence that carries its figures."""
    stopped_ranks = [r for r in e.ranks if r.stopped_fraction >= STOPPED_FRACTION]
    if stopped_ranks and len(e.ranks) > 1:
        r = stopped_ranks[0]
        return Verdict(cause="stopped", sentence=(
            f"rank {r.rank} (pid {r.pid}) is being stopped from outside ({r.stopped_fraction:.0%} of samples in "
            "state T: SIGSTOP, a cgroup freezer or a debugger) and the other ranks wait for it; not a data or compute problem"))
    if e.stopped_fraction >= STOPPED_FRACTION:
        return Verdict(cause="stopped", sentence=(
            f"the trainer is being stopped from outside ({e.stopped_fraction:.0%} of samples in state T: "
            "SIGSTOP, a cgroup freezer or a debugger); not a data or compute problem"))
    slow = straggler(e.ranks)
    if slow:
        rank, median = slow
        seconds = rank.work_seconds
        assert seconds is not None   # straggler() picks among the timed ranks only
        return Verdict(cause="slow_rank", sentence=(
            f"rank {rank.rank} (pid {rank.pid}) is a straggler: {seconds:.2f} s of its own work a micro-batch "
            f"against the other ranks' median {median:.2f} s ({seconds / median:.1f}x); the others wait for it at every step"))
    if e.throttled_fraction is not None and e.throttled_fraction >= THROTTLED_FRACTION:
        quota = f"{e.cgroup_quota_cores:g} cores" if e.cgroup_quota_cores else "its quota"
        return Verdict(cause="throttled", sentence=(
            f"the trainer's cgroup {e.cgroup} is throttled at its CPU quota ({quota}): throttled "
            f"{e.throttled_fraction:.0%} of the time ({e.throttled_periods} periods); raise cpu.max or lower the trainer's threads"))
    if e.steal_percent >= STEAL_PERCENT:
        return Verdict(cause="steal", sentence=(
            f"the hypervisor takes {e.steal_percent:.0f}% of the CPU (steal time): a noisy neighbour on the host, "
            "not in this machine; move the run or wait"))
    capacity = 100.0 * max(e.cores, 1)
    if e.others_cpu_percent >= CONTENTION_SHARE * capacity and e.system_idle_percent < BUSY_IDLE_PERCENT:
        pressure = (f", CPU pressure {e.cpu_pressure_some_avg10:.0f}% (some avg10)"
                    if e.cpu_pressure_some_avg10 is not None else "")
        return Verdict(cause="contention", sentence=(
            f"CPU contention: other processes took {e.others_cpu_percent:.0f}% of the machine's {e.cores} cores "
            f"({_named(e.top_others)}) while the trainer got {e.trainer_cpu_percent:.0f}%{pressure}; "
            "not a data-loading problem: more workers would only add to it. Wait for them, or move them or the run"))
    if (e.cpu_pressure_some_avg10 is not None and e.cpu_pressure_some_avg10 >= HIDDEN_PRESSURE_PERCENT
            and e.trainer_cpu_percent < COMPUTE_BOUND_PERCENT * max(e.cores, 1)):
        # Measured on a shared 2-core machine: the trainer got 107% of 200%, the processes in view 2%, and
        # PSI said 38%: the CPU went to work this watcher cannot see. Not the training step's fault.
        return Verdict(cause="contention", sentence=(
            f"CPU contention from outside this view: the kernel reports tasks waiting for a CPU "
            f"{e.cpu_pressure_some_avg10:.0f}% of the time (PSI some avg10) while the trainer got "
            f"{e.trainer_cpu_percent:.0f}% of {e.cores} cores and the processes in view {e.others_cpu_percent:.0f}%: "
            "another container, the host, or a CPU quota above this cgroup takes it. Wait, or move the run"))
    if e.iowait_percent >= IOWAIT_PERCENT or e.disk_sleep_fraction >= DISK_SLEEP_FRACTION:
        read = f"{e.data_read_mb_s:.0f} MB/s" if e.data_read_mb_s is not None else "unmeasured"
        return Verdict(cause="storage", sentence=(
            f"storage: {e.iowait_percent:.0f}% iowait, the trainer in disk sleep {e.disk_sleep_fraction:.0%} of samples; "
            f"the data folder reads at {read}"))
    if e.num_workers > 0 and e.workers_cpu_percent >= WORKER_SATURATED_PERCENT * e.num_workers:
        return Verdict(cause="data_loader", sentence=(
            f"the data loader is starved: its {e.num_workers} workers use {e.workers_cpu_percent:.0f}% CPU (saturated) "
            f"while the trainer gets {e.trainer_cpu_percent:.0f}%; add num_workers if cores are free"))
    if e.trainer_cpu_percent >= COMPUTE_BOUND_PERCENT:
        return Verdict(cause="compute", sentence=(
            f"no outside cause: the trainer has the machine to itself (others {e.others_cpu_percent:.0f}%) and computes "
            f"at {e.trainer_cpu_percent:.0f}% CPU; the slowdown is inside the training step"))
    return Verdict(cause="unknown", sentence=(
        f"no single cause found: trainer CPU {e.trainer_cpu_percent:.0f}%, workers {e.workers_cpu_percent:.0f}%, "
        f"others {e.others_cpu_percent:.0f}%, iowait {e.iowait_percent:.0f}%, idle {e.system_idle_percent:.0f}%"))


def report(samples: SlownessSamples) -> dict:
    """What the incident stores: the sentence, its cause and the samples, as plain data (`samples`: `evidence` before)."""
    found = verdict(samples)
    return {"verdict": found.sentence, "cause": found.cause, "samples": samples.model_dump()}
