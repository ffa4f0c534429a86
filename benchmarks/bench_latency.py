"""Detection and recovery latency per fault class, on real tiny litgpt runs under `runbook watch`.

    python benchmarks/bench_latency.py                 # each class 5 times; prints median and worst per class
    python benchmarks/bench_latency.py --write         # the same, and writes its section of docs/benchmarks.md
    python benchmarks/bench_latency.py --repeats 9     # more samples per class
    python benchmarks/bench_latency.py --classes sigkill hang   # some classes only
    python benchmarks/bench_latency.py --quick         # the preemptions, SIGKILL and hang only
    python benchmarks/bench_latency.py --smoke         # the test suite's: sigkill only, once, on the toy trainer;
                                                       # <root>/results.json
    python benchmarks/bench_latency.py --trainer toy   # the toy trainer (tests/toy_trainer/) instead of litgpt:
                                                       # the engine's share only; never written to the docs

--smoke runs on the toy trainer (a real process, 40 steps of 0.05 s, a checkpoint every 10, the same
SIGKILL after its second checkpoint under a real `runbook watch`): what it checks is the engine's path
(the pidfd exit clock, the incident's detection and recovery, the report), which is the trainer's only in
its restart time. `--smoke --trainer litgpt` runs the smoke on litgpt; the full mode trains litgpt.

Each class is one scratch run (runbook drill's: 40 optimizer steps of 16 x 64 tokens, a checkpoint
every 10) with engine/watch/faults.py's fault applied:
  preemption-no-notice  the same with trainer.notice_signals: [] (litgpt's own behaviour: no save)
  preemption          SIGTERM to the trainer after its second checkpoint         (faults.FAULTS["preemption"])
                      (the trainer saves on the notice and exits 75; cold relaunch)
  preemption-warm     the same with trainer.warm_spare: true (the relaunch is a warm spare)
  sigkill             SIGKILL to the trainer after its second checkpoint         (same injector, SIGKILL)
  hang                SIGSTOP after the first checkpoint, hang floor 5 s         (faults.FAULTS["hang"])
  corrupt-checkpoint  truncate the third checkpoint, flip a byte in the second,
                      SIGKILL                                                     (faults.FAULTS["corrupt-checkpoint"])
  oom                 micro-batch 512 under a 1300 MB address-space limit        (faults.FAULTS["oom"])

Times, all from the same clock (time.time()):
  exit       when the trainer process ended: this script holds a pidfd on every trainer pid
             runbook writes to <run_dir>/trainer.pid, and the pidfd turns readable at the exit
  injected   when the fault was injected (the SIGSTOP for a hang)
  detected   the incident's detected_at (the time of the observation that matched)
  relaunched the incident's closed_at (runbook's own share ends: detected -> relaunched = runbook_seconds)
  progress   the incident's first_progress_at: the first new progress line runbook read after the relaunch.
             A progress line is litgpt's per-iteration log line (one micro-batch: `iter N step M`), so
             "progress" here is the first iteration after the resume, NOT the first optimizer step (with 4
             micro-batches per step that comes 3 iterations later; benchmarks/bench_relaunch.py times
             relaunch -> the first optimizer step).

Every figure is reported over the samples (--repeats, default 5) as median / worst (the largest), with the
number of samples that had it; results.json keeps every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import statistics
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.bench_math import summarize  # noqa: E402
from engine.watch import faults  # noqa: E402
from engine.core.merge import deep_merge  # noqa: E402
from engine.trainers import adapter_for  # noqa: E402

SECTION = "Detection and recovery latency"

NO_NOTICE = {"trainer": {"notice_signals": []}}   # litgpt as it is: a SIGTERM ends it without a save
WARM_SPARE = {"trainer": {"warm_spare": True}}   # the next launch is a spare with the imports done

CLASSES = {  # name -> (fault config, injector or None)
    "preemption-no-notice": (deep_merge(faults.FAULTS["preemption"].config, NO_NOTICE), faults.FAULTS["preemption"].inject),
    "preemption": (faults.FAULTS["preemption"].config, faults.FAULTS["preemption"].inject),
    "preemption-warm": (deep_merge(faults.FAULTS["preemption"].config, WARM_SPARE), faults.FAULTS["preemption"].inject),
    "sigkill": ({}, faults._signal_after_checkpoint(signal.SIGKILL, 2)),
    "hang": (faults.FAULTS["hang"].config, faults.FAULTS["hang"].inject),
    "corrupt-checkpoint": (faults.FAULTS["corrupt-checkpoint"].config, faults.FAULTS["corrupt-checkpoint"].inject),
    "oom": (faults.FAULTS["oom"].config, None),
}
CRASH_CLASSES = {"preemption-no-notice", "preemption", "preemption-warm", "sigkill", "corrupt-checkpoint", "oom"}
PREEMPTIONS = ("preemption-no-notice", "preemption", "preemption-warm")


# --- several ranks (issue 15): one rank of a 2-rank run killed or stopped ---------------------------------
TWO_RANKS = {"trainer": {"devices": 2}}   # DDP over gloo on the CPU; rank 1 is a child of rank 0


def _rank_pid(run: faults.DrillRun, rank: int) -> int | None:
    """The pid in that rank's heartbeat of the newest launch (engine/process/ranks.py)."""
    from engine.process.ranks import read_folder

    launches = sorted((run.run_dir / "launches").glob("launch-*"))
    beats, _ = read_folder(launches[-1] / "ranks") if launches else ({}, {})
    return beats[rank].pid if rank in beats else None


def _signal_rank_after_checkpoint(sig: int, count: int, rank: int = 1):
    def inject(run: faults.DrillRun) -> float:
        run.wait_for_checkpoint(count)
        deadline = time.monotonic() + run.timeout
        while (pid := _rank_pid(run, rank)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no heartbeat of rank {rank}")
            time.sleep(0.02)
        os.kill(pid, sig)
        return time.time()

    return inject


CLASSES.update({   # injected -> detected is the figure: the trainer process (rank 0) is not the one hit
    "rank1-sigkill": (TWO_RANKS, _signal_rank_after_checkpoint(signal.SIGKILL, 2)),
    "rank1-hang": ({**faults.FAULTS["hang"].config, **TWO_RANKS}, _signal_rank_after_checkpoint(signal.SIGSTOP, 1)),
})

class ExitClock(threading.Thread):
    """pid -> exit time for every trainer the watcher launches (pidfd: no reaping, no polling lag)."""

    def __init__(self, pid_file: Path):
        super().__init__(daemon=True)
        self.pid_file, self.exits, self.stop = pid_file, {}, threading.Event()
        self.fds: dict[int, int] = {}

    def run(self) -> None:
        poller = select.poll()
        while not self.stop.is_set():
            try:
                pid = int(self.pid_file.read_text())
            except (FileNotFoundError, ValueError):
                pid = None
            if pid and pid not in self.fds and pid not in self.exits:
                try:
                    fd = os.pidfd_open(pid)
                    self.fds[pid] = fd
                    poller.register(fd, select.POLLIN)
                except ProcessLookupError:
                    pass
            for fd, _event in poller.poll(5):
                now = time.time()
                pid = next(p for p, f in self.fds.items() if f == fd)
                self.exits[pid] = now
                poller.unregister(fd)
                os.close(self.fds.pop(pid))


# The toy trainer's run (--trainer toy): the drill run's shape (40 steps, a checkpoint every 10); the toy fails
# a micro-batch above 256 at start as litgpt does under the oom class's memory limit at 512.
TOY_RUN = common.toy_settings(40, step_seconds=0.05, save_interval=10, oom_above_micro_batch=256)
TOY_CLASSES = [c for c in CLASSES if not c.startswith("rank1-")]   # the toy trains in one process


def run_class(name: str, root: Path, timeout: float, cache: Path | None = None, trainer: str = "litgpt") -> dict:
    """One sample of a fault class. With `cache` (benchmarks/chaos_contenders.py data_cache), the run starts
    with litgpt's tokenized data already there, as every relaunch does: the first launch does not tokenize
    (nothing measured here happens before the fault, so the figures are the same; the run is shorter).
    trainer "toy": the toy trainer's run (TOY_RUN) with the class's changes."""
    config_changes, inject = CLASSES[name]
    if trainer == "toy":
        config = common.scratch_project(root, **deep_merge(TOY_RUN, config_changes))
    elif cache is not None:
        from benchmarks.chaos_contenders import project

        config = project(root, dict(config_changes), cache)
    else:
        config = common.scratch_project(root, **config_changes)
    loaded = common.load_run(config)
    clock = ExitClock(loaded.run_dir / "trainer.pid")
    clock.start()
    started = time.time()
    proc = common.start_watch(config, root / "watch.log")
    injected = None
    try:
        if inject is not None:
            adapter = adapter_for(loaded.config.trainer.kind)
            injected = inject(faults.DrillRun(loaded.out_dir, loaded.run_dir, proc, adapter, timeout))
        code = proc.wait(timeout=max(1.0, timeout - (time.time() - started)))
    except (subprocess.TimeoutExpired, TimeoutError, RuntimeError) as err:
        common.stop(proc)
        code = f"failed: {err}"
    finally:
        common.stop(proc)  # only if still running (an interrupted benchmark leaves no watcher behind)
    time.sleep(0.1)
    clock.stop.set()
    clock.join()
    records = common.incidents(loaded.run_dir)
    first = records[0] if records else None
    exits = sorted(clock.exits.values())
    result = {"class": name, "watch_exit": code, "incidents": [f"{r['playbook']} ({r['outcome']})" for r in records]}
    if first is None:
        return result
    exit_before = max((t for t in exits if t <= first["detected_at"] + 0.001), default=None)
    verify_s = sum(a["seconds"] for a in first["actions"] if a["verb"] == "verify_checkpoints")
    resume_s = sum(a["seconds"] for a in first["actions"] if a["verb"] == "resume")
    result.update({
        "playbook": first["playbook"], "outcome": first["outcome"],
        "exit_to_detected": first["detected_at"] - exit_before if exit_before and name in CRASH_CLASSES else None,
        "injected_to_detected": first["detected_at"] - injected if injected else None,
        "hang_timeout": first["snapshot"].get("hang_timeout_s") if name == "hang" else None,
        "runbook_s": first.get("runbook_seconds"),
        "verify_s": verify_s, "resume_s": resume_s,
        "restart_s": first.get("trainer_restart_seconds"),
        "steps_lost": first.get("steps_lost"), "exit_code": first.get("trainer_exit_code"),
        "to_progress": (first["first_progress_at"] - (injected or exit_before or first["detected_at"]))
        if first.get("first_progress_at") else None,
    })
    return result


def own_share_goal(results: list[dict], limit_s: float = 1.0) -> str:
    """Issue 7's goal, runbook's own share of a recovery (verify_checkpoints excluded) under 1 s, per class:
    the classes that miss it are named with their worst, and the worst of the others is given."""
    worst: dict[str, float] = {}
    for r in results:
        if r.get("runbook_s") is not None and r.get("outcome") == "recovered":
            worst[r["class"]] = max(worst.get(r["class"], 0.0), r["runbook_s"] - r["verify_s"])
    if not worst:
        return "no recovered sample"
    text = f"runbook's own share of a recovery under {limit_s:g} s (verify_checkpoints excluded): "
    missed = {c: w for c, w in worst.items() if w >= limit_s}
    if not missed:
        return text + f"worst {max(worst.values()):.3f} s, met"
    why = {"preemption-warm": ": its `resume` waited for the warm spare's imports, not done yet so early in the run"}
    kept = [w for c, w in worst.items() if c not in missed]
    return (text + "**missed** by " + ", ".join(f"{c} (worst {w:.3f} s{why.get(c, '')})" for c, w in missed.items())
            + (f"; met by the other {len(kept)} class(es) (worst {max(kept):.3f} s)" if kept else ""))


def notice_goals(results: list[dict]) -> str:
    noticed = [r for r in results if r["class"] in ("preemption", "preemption-warm") and r.get("playbook")]
    lost = [r.get("steps_lost") for r in noticed]
    cold = [r["restart_s"] for r in results if r["class"] == "preemption" and r.get("restart_s") is not None]
    warm = [r["restart_s"] for r in results if r["class"] == "preemption-warm" and r.get("restart_s") is not None]
    parts = [f"a preemption with notice loses 0 optimizer steps: {lost}, " + ("met" if lost and all(x == 0 for x in lost) else "**missed**")
             if noticed else "a preemption with notice loses 0 optimizer steps: not measured (no preemption class in this run)"]
    if cold and warm:
        parts.append(f"relaunch -> first new progress <= 1.5 s: cold {max(cold):.2f} s, warm spare {max(warm):.2f} s, "
                     + ("met" if max(warm) <= 1.5 else "**missed**"))
    return "; ".join(parts) + "."


def contention_sentence(results: list[dict]) -> str:
    """What the 1-minute load average after each sample says about other work on the cores."""
    loads = [float(r["load"].split(",")[0]) for r in results if r.get("load")]
    if not loads:
        return ""
    cores = common.cores()
    text = (f"The 1-minute load average after each sample: median {statistics.median(loads):.2f}, highest "
            f"{max(loads):.2f}, on {cores} cores")
    if max(loads) > 0.75 * cores + 1:   # one trainer and its watcher account for about 1-1.5
        return text + ("; other jobs shared the cores: the trainer restart times (litgpt start-up: imports, data "
                       "loader, model) stretch with the load, runbook's own figures much less.")
    return text + " (a trainer and its watcher alone: no other work to speak of)."


SUMMARY_HEADER = (
    "Median / worst (samples) per fault class. \"progress\" in this table is the **first progress line** runbook "
    "read after the relaunch: litgpt's log line of one iteration (a micro-batch), not the first optimizer step "
    "(benchmarks/bench_relaunch.py times that one). Worst is the largest value.")


def summary_table(results: list[dict], classes: list[str]) -> str:
    """One line per fault class: each figure's median / worst over its samples (bench_math.summarize)."""
    rows = []
    for name in classes:
        rs = [r for r in results if r["class"] == name]
        if not rs:
            continue
        firsts = sorted({f"{r.get('playbook', '-')} ({r.get('outcome', '-')})" for r in rs})
        extra = sum(max(0, len(r["incidents"]) - 1) for r in rs)
        own = [r["runbook_s"] - r["verify_s"] if r.get("runbook_s") is not None else None for r in rs]
        watch_bad = sum(1 for r in rs if r["watch_exit"] != 0)
        rows.append([name, str(len(rs)), ", ".join(firsts),
                     summarize(r.get("exit_to_detected") for r in rs).text(".3f"),
                     summarize(r.get("injected_to_detected") for r in rs).text(".2f"),
                     summarize(r.get("hang_timeout") for r in rs).text(".1f") if name.endswith("hang") else "-",
                     summarize(r.get("runbook_s") for r in rs).text(".3f"),
                     summarize(own).text(".3f"),
                     summarize(r.get("restart_s") for r in rs).text(".2f"),
                     summarize(r.get("to_progress") for r in rs).text(".2f"),
                     summarize(r.get("steps_lost") for r in rs).text("g"),
                     str(extra), f"{len(rs) - watch_bad}/{len(rs)}"])
    headers = ["fault", "samples", "first incident: playbook (outcome)", "exit -> detected s", "injected -> detected s",
               "hang timeout s", "runbook s (detected -> relaunched)", "runbook s without verify_checkpoints",
               "trainer restart s (relaunch -> first progress line)", "fault -> first progress line s", "steps lost",
               "further incidents (all samples)", "watch exit 0"]
    return common.table(headers, rows, right=set(range(1, 13)) - {2})


def fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the three preemptions, sigkill, hang")
    parser.add_argument("--repeats", type=int, default=5, help="samples per class (default 5; --smoke 1)")
    parser.add_argument("--classes", nargs="*", default=None, choices=list(CLASSES))
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--tokenize-each", action="store_true",
                        help="each run's first launch tokenizes the data itself (before: minutes per run on a loaded machine)")
    parser.add_argument("--root", type=Path, default=Path("/tmp/runbook-bench-latency"))
    parser.add_argument("--report-from", type=Path, default=None, metavar="ROOT",
                        help="no measuring: print (and with --write, write) the report of the run kept in ROOT "
                             "(its results.json and run.json)")
    common.trainer_flag(parser)
    common.docs_flags(parser, "the sigkill class once (or --classes), on the toy trainer unless --trainer litgpt")
    args = parser.parse_args()
    trainer = common.chosen_trainer(args)
    if args.smoke:
        args.repeats = 1
    if trainer == "toy" and set(args.classes or []) - set(TOY_CLASSES):
        parser.error(f"--trainer toy trains in one process: no {sorted(set(args.classes) - set(TOY_CLASSES))}")
    classes = args.classes or (["sigkill"] if args.smoke else [*PREEMPTIONS, "sigkill", "hang"] if args.quick
                               else TOY_CLASSES if trainer == "toy" else list(CLASSES))
    if args.report_from:   # the report of an earlier run, from what it kept: nothing is measured
        results = json.loads((args.report_from / "results.json").read_text())
        run = json.loads((args.report_from / "run.json").read_text())
        return report(run, results, write=common.should_write(args))
    load_start = common.load_average()
    t0 = time.time()
    results = []
    cache = None
    if not args.tokenize_each and trainer == "litgpt":   # the toy reads no tokenized data
        from benchmarks.chaos_contenders import data_cache

        cache = data_cache(args.root)   # litgpt's tokenized data, made once and copied into every run
    for repeat in range(args.repeats):
        for name in classes:
            r = run_class(name, args.root / f"{name}-{repeat}", args.timeout, cache, trainer)
            r["load"] = common.load_average()
            results.append(r)
            print(f"  {name}: {r.get('playbook')} {r.get('outcome')}, exit->detected {fmt(r.get('exit_to_detected'), '.3f')} s, "
                  f"runbook {fmt(r.get('runbook_s'), '.3f')} s, restart {fmt(r.get('restart_s'))} s (load {r['load']})", flush=True)
    run = {"command": common.command_line(), "mode": "quick" if args.quick else "smoke" if args.smoke else "default",
           "repeats": args.repeats, "classes": classes, "elapsed_s": time.time() - t0,
           "machine": common.machine(load_start), "tokenize_each": args.tokenize_each, "trainer": trainer}
    args.root.mkdir(parents=True, exist_ok=True)
    (args.root / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (args.root / "run.json").write_text(json.dumps(run, indent=1))   # --report-from rebuilds the report from both
    return report(run, results, write=common.should_write(args))


def report(run: dict, results: list[dict], write: bool) -> int:
    """Print every sample, the median / worst table and the goals; with write, the docs section."""
    classes = run["classes"]

    rows = []
    for r in results:
        own = r["runbook_s"] - r["verify_s"] if r.get("runbook_s") is not None else None
        rows.append([r["class"], f"{r.get('playbook', '-')} ({r.get('outcome', '-')})", fmt(r.get("exit_to_detected"), ".3f"),
                     fmt(r.get("injected_to_detected"), ".2f") + (f" (timeout {r['hang_timeout']:.1f})" if r.get("hang_timeout") else ""),
                     fmt(r.get("runbook_s"), ".3f"), fmt(r.get("verify_s"), ".3f"), fmt(r.get("resume_s"), ".3f"),
                     fmt(own, ".3f"), fmt(r.get("restart_s")), fmt(r.get("to_progress")), fmt(r.get("steps_lost"), "d"),
                     fmt(r.get("exit_code"), "d"), "; ".join(r["incidents"]) or "-",
                     str(r["watch_exit"]), r["load"]])
    headers = ["fault", "playbook (outcome)", "exit -> detected s", "injected -> detected s", "runbook s (detected -> relaunched)",
               "of which verify_checkpoints s", "of which resume s", "runbook s without verify_checkpoints",
               "trainer restart s (relaunch -> first progress line)", "fault -> first progress line s", "steps lost", "trainer exit",
               "all incidents of the run",
               "watch exit", "load avg after"]
    text = common.table(headers, rows, right=set(range(2, 10)))
    summary = summary_table(results, classes)
    crash = [r["exit_to_detected"] for r in results if r.get("exit_to_detected") is not None]
    own = [r["runbook_s"] - r["verify_s"] for r in results if r.get("runbook_s") is not None and r.get("outcome") == "recovered"]
    goal1 = f"crash-class faults detected within 0.5 s of the exit: worst {max(crash):.3f} s, " + ("met" if max(crash) <= 0.5 else "**missed**") if crash else "no crash-class sample"
    goal2 = own_share_goal(results)
    goal3 = notice_goals(results)
    print("\nEvery sample:\n\n" + text + "\n\n" + SUMMARY_HEADER + "\n\n" + summary + "\n\nGoals: " + goal1 + "; " + goal2 + ".\n" + goal3)
    if write and run.get("trainer") == "toy":
        print("\n(docs/benchmarks.md not written: its section reports litgpt runs, this one trained the toy)")
        write = False
    if not write:
        return 0
    killed = next((r for r in results if r["class"] == "sigkill" and r.get("playbook")), None)
    sigkill_text = "" if killed is None else (
        f" A SIGKILL with no message in the log was answered by the `{killed['playbook']}` playbook ({killed['outcome']}"
        f", watch exit {killed['watch_exit']}).")
    rebuilt = f" The report was rebuilt from the run's results.json and run.json by `{common.command_line()}`." \
        if common.command_line() != run["command"] else ""
    rebuilt += f" {run['note']}" if run.get("note") else ""
    body = f"""Command: `{run['command']}` ({run['mode']} mode, {run['repeats']} run(s) per
fault class, {len(classes)} class(es), {run['elapsed_s'] / 60:.1f} min in all).{rebuilt}

Machine: {run['machine']}. {contention_sentence(results)}

One scratch run per sample (runbook drill's run: 40 optimizer steps of 16 x 64 tokens, a checkpoint every
10 steps, poll interval 0.2 s) with engine/watch/faults.py's fault; `sigkill` is the preemption injector with
SIGKILL. {'Each run tokenized its own data on its first launch.' if run['tokenize_each'] else "litgpt's tokenized data is made once and copied into each run (as a relaunch finds it), so no first launch tokenizes."} The exit time comes from a pidfd this benchmark holds on each trainer pid (exact, no polling);
detected is the incident's `detected_at`; runbook s is `runbook_seconds` (detected -> trainer relaunched,
every action included); trainer restart s is `trainer_restart_seconds` (relaunch -> first new progress
line read by runbook). The figures are those of the first incident of each run; the column "all incidents"
lists every incident. Checkpoint verification inside a recovery: `verify_checkpoints` is its own action
(shown); `resume` verifies every checkpoint before it relaunches (inside its own seconds) unless
`verify_checkpoints` already did in the same incident, so each recovery reads every checkpoint once. A
sealed checkpoint is checked against its manifest (CRC32 + sha256), never re-sealed; each pass is in the
run's journal as a `verified` entry.{sigkill_text}

The three preemption lines are the same fault (SIGTERM to the trainer right after its second checkpoint)
under three settings, in this one run: `preemption-no-notice` is litgpt as it is (`trainer.notice_signals: []`:
the signal ends it, exit -15, the steps since the last checkpoint are redone); `preemption` is the default
(the trainer finishes its optimizer step, saves it through a staging folder and exits 75; the relaunch is
cold); `preemption-warm` adds `trainer.warm_spare: true` (the relaunch is a spare interpreter that imported
torch, lightning, litgpt and litdata while the trainer ran). The spare starts with the first launch, in a
lower-priority process group beside the trainer, and the preemption comes a few seconds into the run: where its
imports are not done yet, `resume` waits for them, and that wait is in `preemption-warm`'s runbook s (the spare's
line in the trainer log says how long before the hand-over its imports were done). The injection lands right after a scheduled
save, so the steps the no-notice line loses are few here; on a real run a preemption lands anywhere in the
save interval (half of it lost on average). steps lost = the incident's `steps_lost` (step at the failure -
step resumed).

{SUMMARY_HEADER}

{summary}

Goals (issue 7): {goal1}; {goal2}.
Goals (issue 14): {goal3}"""
    common.write_section(SECTION, body)
    print(f"\nwrote the '{SECTION}' section of {common.DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
