"""Chaos run: one fault schedule on the real tiny litgpt model, three contenders, one table.

    python benchmarks/bench_chaos.py              # default: reference, runbook (cold, warm), naive loop, assisted loop,
                                                  # NaN segment; prints the tables
    python benchmarks/bench_chaos.py --write      # the same, and writes its section of docs/benchmarks.md
    python benchmarks/bench_chaos.py --quick      # restart cap 3, no NaN segment
    python benchmarks/bench_chaos.py --no-assisted   # without (c'), the naive loop with an on-call human
    python benchmarks/bench_chaos.py --naive-at-oom  # the naive loops start at micro-batch 256 like runbook (they meet
                                                  # only the OOM: the comparison before issue 27)
    python benchmarks/bench_chaos.py --smoke      # the test suite's: --quick without (b'), the disk and the NaN segment,
                                                  # on the toy trainer, patience 5 s, 300 s per contender at most;
                                                  # <root>/results.json holds the outcomes
    python benchmarks/bench_chaos.py --trainer toy   # the toy trainer (tests/toy_trainer/) instead of litgpt; never
                                                  # written to the docs

--smoke runs on the toy trainer (a real process under a real `runbook watch`, 12 steps of 0.25 s): what it
checks is the engine's recovery of each fault and the report, the trainer's only in its restart time. The
toy's OOM at start is its own (trainer.extra.oom_above_micro_batch 128: micro-batch 256 fails at start, 128
fits), without an address-space limit or a footprint probe; the naive loop's `litgpt pretrain` with `resume:
auto` is benchmarks/toy_pretrain.py. `--smoke --trainer litgpt` runs the smoke on litgpt (patience 10 s);
the full mode trains litgpt.

docs/benchmarks.md is written only with --write (never with --smoke). The contenders' run folders, the
data cache and results.json are under --root; the repository's run folder is never read for data nor written.

The run: the repo's tiny GPT and data, global batch 256 sequences of 64 tokens, 12 optimizer steps
(196,608 tokens), a checkpoint every 2 steps, keep_last_k 3, the trainer under an address-space limit
(RLIMIT_AS: runbook's trainer.memory_limit_mb; `ulimit -v` for the naive loop), hang floor 5 s
(engine/watch/faults.py `hang`). litgpt's preprocessed data cache is made once and copied into every
contender's run folder. The limit is measured, not fixed (issue 29): the reference runs without it and
records the trainer's peak address space (VmPeak) at micro-batch 128, a one-step probe does the same at
256, and the limit is their midpoint (<root>/memory.json), so the OOM at start and the fit after it are
the same in every run. Measured earlier with the cache present: micro-batch 64 about 980 MB, 128 about
1060-1110 MB, 256 about 1270 MB (the fixed limit was 1160 MB; --memory-limit-mb 1160 runs it so).

The schedule (the same for every contender that gets that far):
  1. OOM at start: runbook's run config asks for micro_batch_size 256 under the measured limit. The naive
     loops start at 128, which fits (issue 27): a restart loop relaunches the same config and cannot halve
     the micro-batch, so at 256 it met the OOM on every restart and never a later fault; the table says the
     OOM does not apply to them and why (--naive-at-oom starts them at 256).
  2. SIGTERM to the trainer once checkpoint step 4 is saved       (engine/watch/faults.py preemption injector)
  3. SIGSTOP (a hang) once checkpoint step 6 is saved             (engine/watch/faults.py hang injector)
  4. once checkpoint step 10 is saved: truncate it, flip a byte in the one before, SIGKILL
                                                                   (engine/watch/faults.py corrupt-checkpoint)
  5. the disk fills up: out_dir is a 13 MB tmpfs (each checkpoint is 2 MB; litgpt deletes none).
     Needs root (mount); without it the disk fault is skipped and the table says so.
  6. divergence/NaN: engine/watch/faults.py `nan` (lr 10) as its own segment of the same run, because a
     mid-run lr change cannot be injected into both contenders alike: runbook launches from the config
     it loaded at start (plus its own write-backs), so an edit of the file mid-run would reach the
     naive loop's next launch but not runbook's.

Contenders:
  (a) reference: `litgpt pretrain` of the same run at micro-batch 128 (what fits), no fault.
  (b) `runbook watch` on the run config.
  (c) the naive loop, `until litgpt pretrain --config X; do :; done` with `resume: auto` in X (the
      config runbook's adapter generates, same environment) and a restart cap: NAIVE_LOOP in benchmarks/chaos_contenders.py,
      written as naive_loop.sh into its run folder. A hang it never notices is given up on after --patience s.
  (c') the same loop with an on-call human who SIGKILLs a hung trainer after --patience s without progress
      (each kill a human action; the wait is in its wall time, the human's reaction time is not counted).
      The table's "stopped at" column says which fault ended each contender and what happened.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.chaos_report import (  # noqa: E402
    HEADERS, Outcome, accounting, details_table, divergence_note, floor_text, goals, ratio_goal, rows, stops_table,
    time_budget, warm_text,
)
from benchmarks import chaos_contenders as harness  # noqa: E402
from benchmarks.chaos_contenders import (  # noqa: E402
    BATCH, BLOCK, GOOD_MB, OOM_MB, SAVE_INTERVAL, SCHEDULE, TMPFS_MB, data_cache, run_naive,
    run_reference, run_runbook, settings,
)
from engine.watch import faults  # noqa: E402

SECTION = "Chaos run"


def watch_settings():
    """The contenders' watch settings (engine/core/config.py WatchSettings with the run's overrides): the
    hang floor, factor and ceiling the floor's hang line is derived with."""
    from engine.core.config import WatchSettings

    return WatchSettings(**settings(GOOD_MB, 1)["watch"])


WATCH = watch_settings()
HANG_FLOOR_S = WATCH.hang_floor_s
SCHEDULE_LABELS = [label for _step, label, _inject in SCHEDULE]
TOY_MEMORY_TEXT = (f"no address-space limit: the toy trainer fails a micro-batch above {GOOD_MB} at start itself "
                   "(trainer.extra.oom_above_micro_batch)")


def oom_not_applied(assisted: bool = False) -> str:
    return (f"does not apply: it starts at micro-batch {GOOD_MB}, which fits under the limit (a restart loop relaunches "
            f"the same config and cannot halve the micro-batch: at {OOM_MB} it meets the OOM on every restart and no "
            f"later fault; --naive-at-oom runs it so)" + (" -- the same start as (c)" if assisted else ""))


# --- the run and its report -------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="restart cap 3, no NaN segment")
    parser.add_argument("--assisted", action="store_true", help="(the default now: kept for old command lines)")
    parser.add_argument("--no-assisted", action="store_true", help="skip (c'), the naive loop with an on-call human")
    parser.add_argument("--naive-at-oom", action="store_true",
                        help=f"start the naive loops at micro-batch {OOM_MB} like runbook (they then meet only the OOM)")
    parser.add_argument("--restart-cap", type=int, default=None, help="naive loop restarts (default 5, --quick 3)")
    parser.add_argument("--patience", type=float, default=60.0, help="s without progress after the SIGSTOP before the naive loop counts as hung")
    parser.add_argument("--no-disk", action="store_true", help="skip the tmpfs disk fault")
    parser.add_argument("--no-nan", action="store_true", help="skip the NaN segment")
    parser.add_argument("--no-warm", action="store_true", help="skip (b'), runbook with trainer.warm_spare")
    parser.add_argument("--only-nan", action="store_true", help="the reference and the NaN segment only; docs untouched")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=900.0, help="per contender")
    parser.add_argument("--root", type=Path, default=Path("/tmp/runbook-bench-chaos"))
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: the trainer on the GPU, without the memory limit and so without the OOM at start")
    parser.add_argument("--section", default=SECTION, help="the docs/benchmarks.md section to write")
    parser.add_argument("--memory-limit-mb", type=int, default=None,
                        help="the trainer's address-space limit (default: the midpoint of the footprints measured at "
                             f"micro-batch {GOOD_MB} and {OOM_MB} in this run)")
    common.trainer_flag(parser)
    common.docs_flags(parser, "--quick --no-warm --no-disk --no-nan --patience 10 (on the toy: 5, --timeout 300), on the toy "
                              "trainer unless --trainer litgpt")
    args = parser.parse_args()
    harness.TRAINER = common.chosen_trainer(args)
    if args.smoke:
        args.quick, args.no_warm, args.no_disk, args.no_nan = True, True, True, True
        # the toy resumes in a fraction of a second: 5 s without progress after the SIGSTOP is a hang; a toy
        # contender takes well under a minute even on loaded cores, so one still running after 5 min is stuck
        args.patience = min(args.patience, 5.0 if harness.TRAINER == "toy" else 10.0)
        args.timeout = min(args.timeout, 300.0) if harness.TRAINER == "toy" else args.timeout
    if harness.TRAINER == "toy" and args.device == "cuda":
        parser.error("--trainer toy runs on the CPU only")
    harness.DEVICE = args.device
    start_mb = OOM_MB if harness.DEVICE == "cpu" else GOOD_MB
    naive_mb = start_mb if args.naive_at_oom else GOOD_MB
    args.assisted = not args.no_assisted
    rb_oom = "applied" if start_mb == OOM_MB else "does not apply on cuda (no address-space limit)"
    cap = args.restart_cap if args.restart_cap is not None else (3 if args.quick else 5)
    nan_segment = not (args.quick or args.no_nan)
    use_tmpfs = not args.no_disk
    load_start = common.load_average()
    t0 = time.time()

    print(f"chaos run: {args.steps} steps, restart cap {cap}, trainer {harness.TRAINER}; root {args.root}", flush=True)
    cache = data_cache(args.root)
    reference = run_reference(args.root / "reference", args.steps, cache)
    print(f"  reference: {reference.wall_s:.0f} s, steps {reference.steps}", flush=True)
    litgpt_on_cpu = harness.DEVICE == "cpu" and harness.TRAINER == "litgpt"
    if litgpt_on_cpu and args.memory_limit_mb is None and not args.only_nan:
        harness.probe_footprint(args.root / "footprint-probe", OOM_MB, cache)
    args.memory_text = (harness.set_memory_limit(args.memory_limit_mb) if litgpt_on_cpu else "no limit on cuda"
                        if harness.DEVICE == "cuda" else TOY_MEMORY_TEXT)
    print(f"  memory: {args.memory_text}", flush=True)
    (args.root / "memory.json").write_text(json.dumps({"limit_mb": harness.MEMORY_LIMIT_MB, "footprints_mb": harness.FOOTPRINTS,
                                                       "text": args.memory_text, "trainer": harness.TRAINER}, indent=1))
    contenders = [reference]
    if args.only_nan:
        return report_nan_only(args, reference, cap, cache)
    runbook = run_runbook(args.root / "runbook", settings(start_mb, args.steps), SCHEDULE, use_tmpfs, args.timeout,
                          "(b) runbook watch", cache)
    print(f"  runbook: {runbook.wall_s:.0f} s, completed {runbook.completed}, {runbook.incidents}", flush=True)
    runbook.oom = rb_oom
    contenders.append(runbook)
    warm = None
    if not args.no_warm:
        warm_settings = settings(start_mb, args.steps)
        warm_settings["trainer"]["warm_spare"] = True
        warm = run_runbook(args.root / "runbook-warm", warm_settings, SCHEDULE, use_tmpfs, args.timeout,
                           "(b') runbook watch, warm spare", cache)
        print(f"  runbook warm: {warm.wall_s:.0f} s, completed {warm.completed}, {warm.incidents}", flush=True)
        warm.oom = rb_oom
        contenders.append(warm)
    naive = run_naive(args.root / "naive", settings(naive_mb, args.steps), SCHEDULE, use_tmpfs, args.timeout, cap,
                      f"(c) naive loop, cap {cap}, micro-batch {naive_mb}", cache, patience=args.patience)
    naive.oom = "applied" if naive_mb == OOM_MB else oom_not_applied()
    print(f"  naive: {naive.wall_s:.0f} s, completed {naive.completed}, {naive.note}", flush=True)
    contenders.append(naive)
    if args.assisted:
        fixed = naive_mb != GOOD_MB
        helped = run_naive(args.root / "naive-assisted", settings(GOOD_MB, args.steps), SCHEDULE, use_tmpfs, args.timeout,
                           cap, f"(c') naive loop, cap {cap}, " + ("micro-batch fixed by hand, " if fixed else "")
                           + "a human kills a hung trainer", cache, patience=args.patience, assisted=True)
        if fixed:
            helped.human_actions += 1  # the micro-batch edit before the launch
            helped.oom = f"fixed by hand: the human set micro-batch {GOOD_MB} before the launch (a human action)"
        else:
            helped.oom = oom_not_applied(assisted=True)
        print(f"  naive assisted: {helped.wall_s:.0f} s, completed {helped.completed}, {helped.note}", flush=True)
        contenders.append(helped)
    nan_rows = run_nan_segment(args, reference, cap, cache) if nan_segment else []
    elapsed = time.time() - t0

    main_table = common.table(HEADERS, rows(contenders, reference), right={2, 3, 4, 5, 8})
    stops = stops_table(contenders[1:], SCHEDULE_LABELS)
    print("\n" + main_table + "\n\n" + stops)
    print("\n" + details_table(runbook))
    for contender in filter(None, [runbook, warm]):
        print("\n" + accounting(contender, reference))
    print("\n" + floor_text(warm or runbook, reference, WATCH))
    nan_table = ""
    if nan_rows:
        nan_table = common.table(HEADERS, rows(nan_rows, reference), right={2, 3, 4, 5, 8})
        print("\n" + nan_table + "\n\n" + details_table(nan_rows[1]))
    (args.root / "results.json").write_text(json.dumps([o.__dict__ for o in contenders + nan_rows[1:]], indent=1, default=str))
    if not common.should_write(args):
        return 0
    body = doc_body(args, cap, load_start, elapsed, main_table + "\n\nWhere each contender stopped, and why:\n\n" + stops,
                    details_table(runbook), nan_table,
                    details_table(nan_rows[1]) if nan_rows else "", runbook, reference, nan_rows[1] if nan_rows else None,
                    warm)
    common.write_section(args.section, body, first=True)
    print(f"\nwrote the '{args.section}' section of {common.DOCS}")
    return 0


def run_nan_segment(args, reference: Outcome, cap: int, cache: Path) -> list[Outcome]:
    """The divergence segment: the same run at the `nan` fault's lr, runbook and the naive loop."""
    lr = faults.FAULTS["nan"].config["lr"]
    nan_rb = run_runbook(args.root / "nan-runbook", settings(GOOD_MB, args.steps, lr=lr), [], False, args.timeout,
                         f"(b) runbook watch, lr {lr:g}", cache)
    print(f"  nan runbook: {nan_rb.wall_s:.0f} s, completed {nan_rb.completed}, {nan_rb.incidents}", flush=True)
    nan_nv = run_naive(args.root / "nan-naive", settings(GOOD_MB, args.steps, lr=lr), [], False, args.timeout, cap,
                       f"(c) naive loop, cap {cap}, lr {lr:g}", cache)
    print(f"  nan naive: {nan_nv.wall_s:.0f} s, completed {nan_nv.completed}, {nan_nv.note}", flush=True)
    return [reference, nan_rb, nan_nv]


def report_nan_only(args, reference: Outcome, cap: int, cache: Path) -> int:
    """--only-nan: print the segment's tables and goals; the docs keep the last full run."""
    nan_rows = run_nan_segment(args, reference, cap, cache)
    print("\n" + common.table(HEADERS, rows(nan_rows, reference), right={2, 3, 4, 5, 8}))
    print("\n" + details_table(nan_rows[1]))
    print("\n" + divergence_note(nan_rows[1], reference))
    print("\ngoals: " + goals(nan_rows[1], reference))
    return 0


def doc_body(args, cap, load_start, elapsed, main_table, rb_details, nan_table, nan_details, runbook, reference,
             nan_rb=None, warm=None) -> str:
    mode = ("quick" if args.quick else "default") + (" mode" if args.assisted else " mode without (c')")
    oom = (f"OOM at start (micro_batch_size {OOM_MB} under the limit; {args.memory_text})"
           if harness.DEVICE == "cpu" else "no OOM at start: a CUDA process cannot run under an address-space limit (the real "
           "CUDA OOM is benchmarks/gpu_drill.sh's drill)")
    steps = ", ".join(f"({i}) {label} once checkpoint {step} is saved" for i, (step, label, _) in enumerate(SCHEDULE, 2))
    disk = (f"({len(SCHEDULE) + 2}) out_dir is a {TMPFS_MB} MB tmpfs (each checkpoint is 2 MB; litgpt deletes none)"
            + (" -- skipped (--no-disk)" if args.no_disk else ""))
    naive_mb = OOM_MB if args.naive_at_oom and harness.DEVICE == "cpu" else GOOD_MB
    naive_start = (f"The naive loops start at micro-batch {naive_mb}, which fits: the OOM at start does not apply to them "
                   f"(a restart loop relaunches the same config and cannot halve the micro-batch, so at {OOM_MB} it met the OOM "
                   "on every restart and never a later fault: the comparison before issue 27), so they meet every later "
                   "fault runbook meets." if naive_mb == GOOD_MB else
                   f"The naive loop starts at micro-batch {OOM_MB} like runbook (--naive-at-oom).")
    assisted = (f"\n{naive_start} (c) is given up on after {args.patience:g} s without progress after the SIGSTOP (it never "
                "notices a hang)." + ("" if not args.assisted else f"""
(c') is the naive loop with an on-call human: {'the micro-batch fixed by hand to ' + str(GOOD_MB) + ' before the launch, and ' if naive_mb != GOOD_MB else ''}the hung trainer SIGKILLed by hand after {args.patience:g} s without progress, the
loop going on after it. Counted as the seed's `--assisted` counted them: each hand action is one in "human
actions", the {args.patience:g} s the human waits before each kill is inside (c')'s wall time, and the human's own
reaction time (noticing, logging in) is not counted. Neither loop does anything about a corrupt checkpoint or a
full disk: `resume: auto` loads the newest `step-*` folder whatever it holds, and litgpt deletes no checkpoint."""))
    nan_text = (f"""
**Divergence / NaN segment**: engine/watch/faults.py `nan` (lr {faults.FAULTS['nan'].config['lr']:g} in the run config), otherwise
the same run, no other fault. It runs as its own segment: a mid-run lr change cannot be injected into both
contenders alike (runbook launches from the config it loaded at start plus its own write-backs, so an edit of
the file mid-run would reach the naive loop's next launch and not runbook's). The reference row is the run
above at its configured lr. A loss-spike incident has no "steps since the last intact checkpoint" bound: its
rollback goes back to before the spike on purpose (every step after it trained on diverged weights), so the
steps it loses are the spike's, reported as they are.

{nan_table}

runbook's incidents in this segment:

{nan_details}

{divergence_note(nan_rb, reference)}

Goals (issue 7) for runbook in this segment: {goals(nan_rb, reference)}.
""" if nan_table else "\nThe divergence/NaN segment was not run in this mode (--quick or --no-nan); the last figures of it are in "
                     "'After the package move (issue 25)' below (and in this section's history in git).\n")
    return f"""Command: `{common.command_line()}` ({mode}, {elapsed / 60:.1f} min in all).

Machine: {common.machine(load_start)}. Other jobs shared the 2 cores: wall times are comparable only
roughly (the load average at each contender's start is in the table).

The run: the repo's tiny GPT and data, global batch {BATCH} x {BLOCK} tokens, {args.steps} optimizer steps
({BATCH * BLOCK * args.steps:,} tokens), a checkpoint every {SAVE_INTERVAL} steps, keep_last_k 3, the trainer under a
{harness.MEMORY_LIMIT_MB} MB address-space limit (RLIMIT_AS; on cpu only), hang floor {HANG_FLOOR_S:g} s (engine/watch/faults.py `hang`); litgpt's preprocessed data cache is made once
and copied into each contender's run folder. Trainer device: {harness.DEVICE}. The schedule: (1) {oom}, {steps}, {disk}. Injections are engine/watch/faults.py's
own injectors, keyed to the checkpoint step so every contender gets them at the same point of training.
(a) is `litgpt pretrain` of the same run at micro-batch {GOOD_MB} with no fault; (b) `runbook watch` (starting at micro-batch
{OOM_MB if harness.DEVICE == "cpu" else GOOD_MB}); (c) the naive
loop `until litgpt pretrain --config X; do :; done` with `resume: auto` in X (the litgpt config runbook's adapter
generates; same environment and memory limit), at most {cap} restarts (`NAIVE_LOOP` in benchmarks/chaos_contenders.py).
Goodput: reference wall / contender wall (for a completed run), and optimizer steps in the delivered model / all
optimizer steps computed, repeats included.{assisted}

{main_table}

runbook's incidents (detected after injection: from the injection to the incident's `detected_at`; the OOM at
start has no injection to measure from; runbook s: detected -> trainer relaunched; trainer restart s: relaunch ->
first new progress line):

{rb_details}

{time_budget(runbook, reference)}

Goals (issue 7) for runbook on this schedule: {goals(runbook, reference)}.
{warm_text(warm, reference)}
Where every second of runbook's extra wall time went (benchmarks/chaos_report.py `accounting`: each line
measured from the journal, the incidents and the trainer logs; the last line is what is left, and what it holds):

{accounting(runbook, reference)}
{("" if warm is None else chr(10) + accounting(warm, reference) + chr(10))}
Goal (issue 14): runbook's wall time at most 2.0x the reference's: {ratio_goal(runbook, warm, reference)}.

The floor of this schedule (benchmarks/chaos_report.py `floor_lines`): what any supervisor would spend beyond
the reference, before its own start-up, actions and relaunches. Each line says whether it is measured in this run
or set (with the setting's value); the hang line is the run's own derived hang timeout: the watcher's function
(engine/observe/observer.py `Observer.hang_timeout`: {WATCH.hang_safety_factor:g} x the longest gap between progress
lines, clamped to the floor {WATCH.hang_floor_s:g} s and the ceiling {WATCH.hang_timeout_s:g} s) applied to the
longest progress gap measured in the contender's own run before the SIGSTOP (each progress line of its trainer logs
stamped by this benchmark as it appeared, polled every 50 ms; the reference's, polled every 20 ms, when that is
missing), beside the value runbook's own watcher recorded in its hang incident. The benchmark's stamps and the
watcher's own reading of the log can differ on loaded cores: the line names both.

{floor_text(warm or runbook, reference, WATCH)}
{nan_text}"""


if __name__ == "__main__":
    sys.exit(main())
