"""The chaos benchmark's outcome model and its tables, goal checks and notes (no processes, no files)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from benchmarks import common


@dataclass
class Outcome:
    name: str
    completed: bool = False
    steps: int | None = None          # optimizer steps in the delivered model (final/)
    tokens: int | None = None
    val_loss: float | None = None
    wall_s: float = 0.0
    steps_computed: int = 0
    incidents: list = field(default_factory=list)   # one short text per incident
    steps_lost: list = field(default_factory=list)
    human_actions: int = 0
    first_loss: float | None = None
    note: str = ""
    load: str = ""
    details: list = field(default_factory=list)
    timeline: dict = field(default_factory=dict)   # times accounting() splits the wall time by
    injected: list = field(default_factory=list)   # the labels of the mid-run faults injected into it, in order
    last_failure: str = ""                          # what ended its last attempt (the naive loops), classified
    oom: str | None = None                          # "applied", or why the OOM at start does not apply to it


def fmt(x, spec="") -> str:
    return "-" if x is None else format(x, spec)


def rows(outcomes: list[Outcome], reference: Outcome) -> list[list]:
    out = []
    for o in outcomes:
        goodput_wall = reference.wall_s / o.wall_s if o.completed and o.wall_s else None
        goodput_steps = (o.steps or 0) / o.steps_computed if o.steps_computed else None
        lost = ", ".join("-" if s is None else str(s) for s in o.steps_lost) or "-"
        out.append([o.name, "yes" if o.completed else "**no**", fmt(o.steps), fmt(o.tokens, ","), fmt(o.val_loss, ".4f"),
                    f"{o.wall_s:.0f}", f"{len(o.incidents)}" + (f" ({'; '.join(o.incidents)})" if o.incidents else ""),
                    lost, fmt(goodput_wall, ".2f"), f"{o.steps or 0}/{o.steps_computed}" + (f" = {goodput_steps:.2f}" if goodput_steps is not None else ""),
                    str(o.human_actions), o.note or "", o.load])
    return out


HEADERS = ["contender", "completed", "optimizer steps", "tokens", "final val loss", "wall s", "incidents",
           "steps lost per incident", "goodput (ref wall / wall)", "useful / computed steps", "human actions", "outcome",
           "load avg at start"]


def stops_table(outcomes: list[Outcome], schedule: list[str]) -> str:
    """Where each contender stopped and why: the faults it met, the one it stopped at, what happened."""
    from benchmarks.bench_math import stop_point

    rows_ = []
    for o in outcomes:
        met, where, why = stop_point(o.completed, schedule, o.injected, o.note, o.oom, o.last_failure)
        rows_.append([o.name, o.oom or "-", met, where, why])
    return common.table(["contender", "OOM at start", "faults met", "stopped at", "what happened"], rows_, right=set())


def details_table(outcome: Outcome) -> str:
    rows_ = [[d["id"], d["playbook"], d["outcome"], fmt(d["step_at_failure"]), fmt(d["resumed_step"]), fmt(d["steps_lost"]),
              fmt(d["allowed"]), fmt(d["after_injection_s"]), fmt(d["runbook_s"]), fmt(d["trainer_restart_s"]),
              ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in d["config_changes"].items()) or "-", d["note"] or "-"]
             for d in outcome.details]
    return common.table(["incident", "playbook", "outcome", "step at failure", "resumed from step", "steps lost",
                         "steps since the last intact checkpoint", "detected after injection (s)", "runbook s",
                         "trainer restart s", "config changes", "note"], rows_, right={3, 4, 5, 6, 7, 8, 9})


def goals(runbook: Outcome, reference: Outcome) -> str:
    """The issue's goals for runbook, checked on this run's figures."""
    checks = []
    checks.append(("completes", runbook.completed))
    checks.append((f"same optimizer steps ({runbook.steps} vs {reference.steps}) and tokens "
                   f"({fmt(runbook.tokens, ',')} vs {fmt(reference.tokens, ',')}) as the reference",
                   runbook.completed and runbook.steps == reference.steps and runbook.tokens == reference.tokens))
    if runbook.val_loss is not None and reference.val_loss:
        diff = abs(runbook.val_loss - reference.val_loss) / reference.val_loss
        checks.append((f"final val loss within 5% of the reference ({100 * diff:.2f}%)", diff <= 0.05))
    else:
        checks.append(("final val loss within 5% of the reference (no final val loss)", False))
    over = [d for d in runbook.details if d["allowed"] is not None and d["steps_lost"] is not None and d["steps_lost"] > d["allowed"]]
    checks.append(("steps lost per incident no more than the steps since the last intact checkpoint"
                   + (f" (exceeded by {', '.join(d['id'] for d in over)})" if over else ""), not over))
    checks.append(("no human action", runbook.human_actions == 0))
    return "; ".join(f"{text}: {'met' if ok else '**missed**'}" for text, ok in checks)


def time_budget(runbook: Outcome, reference: Outcome) -> str:
    """Where runbook's wall time beyond the reference's went."""
    if not runbook.completed:
        return ""
    extra = runbook.wall_s - reference.wall_s
    restarts = sum(d["trainer_restart_s"] or 0 for d in runbook.details)
    waits = sum(d["after_injection_s"] or 0 for d in runbook.details)
    own = sum(d["runbook_s"] or 0 for d in runbook.details)
    false_hangs = sum("false alarm" in d["note"] for d in runbook.details)
    return (f"runbook took {extra:.0f} s more than the reference. Inside its run: {restarts:.0f} s of trainer restarts"
            f" (relaunch -> first new progress: litgpt's start-up and resume, {len([d for d in runbook.details if d['trainer_restart_s']])}"
            f" relaunches), {waits:.0f} s between the injections and their detection (nearly all of it the hang timeout),"
            f" {own:.1f} s of runbook's own actions, {runbook.steps_computed - (runbook.steps or 0)} optimizer steps computed"
            f" again, and the first launch, which died of the OOM."
            + (f" {false_hangs} hang incident(s) were false alarms (see the note column)." if false_hangs else ""))


def divergence_note(nan_rb: Outcome, reference: Outcome) -> str:
    if nan_rb is None or nan_rb.val_loss is None or reference.first_loss is None:
        return ""
    text = (f"runbook's delivered model has a final val loss of {nan_rb.val_loss:.2f}, against {reference.val_loss:.2f} for the"
            f" reference and {reference.first_loss:.2f} for the untrained model (the reference's first logged train loss)")
    baselines = [float(m.group(1)) for d in nan_rb.details if d["playbook"] == "loss-spike"
                 and (m := re.search(r"best rolling median ([\d.]+)", d["note"]))]
    lrs = [f"lr {d['config_changes']['lr'][0]:g} -> {d['config_changes']['lr'][1]:g}" for d in nan_rb.details
           if d["playbook"] == "loss-spike" and "lr" in d["config_changes"]]
    if nan_rb.val_loss > reference.first_loss and any(b > reference.first_loss for b in baselines[1:]):
        text += (f": worse than no training at all. The later loss-spike incidents judged the loss against a baseline of"
                 f" {', '.join(f'{b:.1f}' for b in baselines[1:])} (their best rolling median), above the untrained model's"
                 " loss: a diverged level passed as normal")
    elif lrs:
        text += (f". Every spike was caught against the healthy baseline ({', '.join(f'{b:.2f}' for b in baselines)}) and"
                 f" rolled back to before it, and each repeat cut the lr four times harder than the one before"
                 f" (`lr / 4 ** attempt`: {'; '.join(lrs)})")
        if nan_rb.val_loss > reference.val_loss * 1.05:
            text += (", yet the run finished at an lr still too far above the reference's, which no longer diverges but"
                     " trains worse in the steps that remain")
    return text + "."


def accounting_lines(runbook: Outcome, reference: Outcome) -> list[tuple[str, float]]:
    """PURE. (what, seconds) lines that sum to runbook's wall time minus the reference's: each measured,
    the last the remainder. Both runs are split the same way: start-up (start -> first progress line),
    iterations (the sum of the logged iter times), and the rest."""
    rb, ref = runbook.timeline, reference.timeline
    if not rb.get("launches") or ref.get("first_progress") is None:
        return []
    launches, incidents = rb["launches"], rb.get("incidents", [])
    ref_startup = ref["first_progress"] - ref["started"]
    lines = [("watcher start-up before the first launch (config, data hash, preflight)", launches[0] - rb["started"])]
    rest = incidents
    if incidents and incidents[0]["playbook"] == "oom" and len(launches) > 1:
        # launch 1 -> launch 2: litgpt's start-up until the OOM, its detection and runbook's actions
        lines.append(("the OOM launch (start-up until the OOM, detection, actions)", launches[1] - launches[0]))
        lines.append(("the OOM incident's relaunch -> first progress, minus the reference's own start-up "
                      f"({ref_startup:.1f} s)", incidents[0]["restart_s"] - ref_startup))
        rest = incidents[1:]
    else:
        lines.append(("the first launch's start-up beyond the reference's", 0.0))
    injected = sorted(rb.get("injected", []))
    detection, answered = 0.0, 0
    for incident in rest:
        before = [t for t in injected if t <= incident["detected_at"]]
        if before:
            detection += incident["detected_at"] - before[-1]
            injected.remove(before[-1])
            answered += 1
    lines.append((f"detection of the {answered} injected faults (injection -> incident; the notice save and the hang timeout in it)", detection))
    lines.append((f"runbook's own actions (detected -> relaunched or done), {len(rest)} incidents", sum(i["runbook_s"] for i in rest)))
    relaunches = sum(1 for i in rest if i["restart_s"])
    lines.append((f"trainer restarts (relaunch -> first new progress line), {relaunches} relaunches",
                  sum(i["restart_s"] for i in rest)))
    steps_lost = sum(i["steps_lost"] for i in incidents)
    lines.append((f"training iterations beyond the reference's ({steps_lost} optimizer steps computed again, "
                  "and slower iterations on the shared cores)", rb.get("iter_s", 0.0) - ref.get("iter_s", 0.0)))
    extra = runbook.wall_s - reference.wall_s
    spares = rb.get("spare_import_cpu_s")
    lines.append(("the rest: validations, checkpoint saves (the notice save included), the time from a fault to its "
                  "injection being seen, the final save and the watcher seeing the exit, beyond the reference's"
                  + (f"; and the warm spares' imports beside the training ({spares:.1f} CPU s in the spares that became "
                     "launches, and the last one's, which no launch used, on the same cores)" if spares else ""),
                  extra - sum(seconds for _what, seconds in lines)))
    return lines


def floor_lines(runbook: Outcome, reference: Outcome, watch) -> list[tuple[str, float, str]]:
    """PURE. The seconds of this schedule that no supervisor can avoid beyond the reference's, from this
    run's figures, as (what, seconds, source) where source says whether the line is measured in this run or
    a setting (with its value): one that lets the OOM at start happen (the trainer's own time until it dies),
    knows a hang by the run's own derived hang timeout (engine/observe/observer.py Observer.hang_timeout over
    the reference's longest progress gap, `watch` holding the run's hang settings), saves on the notice (the
    step in progress, then the save) and recomputes the steps the corrupted checkpoints took with them.
    Relaunches are left out: they are the part a supervisor can shrink."""
    from benchmarks.bench_math import derived_hang_timeout

    rb = runbook.timeline
    if not runbook.completed or not rb.get("launches") or not reference.steps:
        return []
    incidents, lines = rb.get("incidents", []), []
    if incidents and incidents[0]["playbook"] == "oom":
        lines.append(("the OOM launch: the trainer's own time from its launch to the OOM (and its detection)",
                      incidents[0]["detected_at"] - rb["launches"][0], "measured: launch -> the oom incident's detected_at"))
    if hangs := sum(1 for i in incidents if i["playbook"] == "hang"):
        own, ref = rb.get("longest_gap_s"), reference.timeline.get("longest_gap_s")
        gap, whose = (own, f"{runbook.name}'s run before the SIGSTOP") if own is not None else (ref, "the reference run")
        settings = (f"settings: factor {watch.hang_safety_factor:g}, floor {watch.hang_floor_s:g} s, "
                    f"ceiling {watch.hang_timeout_s:g} s")
        if gap is not None:
            timeout = derived_hang_timeout(gap, watch)
            raw = watch.hang_safety_factor * gap
            binds = ("the floor setting binds" if raw < watch.hang_floor_s else
                     "the ceiling setting binds" if raw > watch.hang_timeout_s else "the measured gap binds")
            source = (f"derived: Observer.hang_timeout of the longest progress gap measured in {whose}, {gap:.2f} s "
                      f"= min(ceiling, max(floor, {watch.hang_safety_factor:g} x {gap:.2f} = {raw:.2f} s)), {binds} "
                      f"({settings})")
        else:
            timeout = watch.hang_floor_s
            source = f"setting: hang_floor_s = {watch.hang_floor_s:g} s (no progress gap measured)"
        recorded = [i["hang_timeout_s"] for i in incidents if i["playbook"] == "hang" and i.get("hang_timeout_s")]
        if recorded:
            source += f"; the watcher's own value in the run: {', '.join(f'{t:.1f}' for t in recorded)} s"
        if ref is not None and gap is not ref:
            source += f"; from the reference's longest gap ({ref:.2f} s) it would be {derived_hang_timeout(ref, watch):.1f} s"
        lines.append((f"the hang timeout ({timeout:.1f} s), {hangs} hang(s)", hangs * timeout, source))
    notice = [d["after_injection_s"] for d in runbook.details
              if d["playbook"] == "preemption" and d["steps_lost"] == 0 and d["after_injection_s"] is not None]
    if notice:
        lines.append(("the notice save: the step in progress and the save (injection -> incident)", sum(notice),
                      "measured: SIGTERM -> the preemption incident's detected_at"))
    lost = sum(i["steps_lost"] for i in incidents)
    per_step = reference.timeline.get("iter_s", 0.0) / reference.steps
    lines.append((f"{lost} optimizer steps computed again, at the reference's {per_step:.3f} s per step", lost * per_step,
                  "measured: the incidents' steps_lost x the reference's logged iteration time per step"))
    return lines


def floor_text(runbook: Outcome, reference: Outcome, watch) -> str:
    """The floor as a table (each line measured or a setting) and what it means for the 2.0x goal, with
    and without the hang line."""
    from benchmarks.bench_math import floor_ratios

    lines = floor_lines(runbook, reference, watch)
    if not lines or not reference.wall_s:
        return ""
    r = floor_ratios(reference.wall_s, lines)
    floor = r["floor_s"]
    restarts = [i["restart_s"] for i in runbook.timeline.get("incidents", [])[1:] if i["restart_s"]]
    rows_ = [[what, f"{s:.1f}", source] for what, s, source in lines]
    rows_.append([f"**floor beyond the reference ({reference.wall_s:.1f} s)**", f"**{floor:.1f}**",
                  "sum; without the hang line " + f"{r['floor_without_hang_s']:.1f} s"])
    with_restarts = (reference.wall_s + floor + sum(restarts)) / reference.wall_s
    return (common.table([f"what no supervisor avoids on this schedule ({runbook.name}'s figures)", "s", "measured or set"],
                         rows_, right={1})
            + f"\n\nA supervisor with no start-up, no actions and no relaunch cost would still need {reference.wall_s + floor:.1f} s"
            f" = **{r['ratio']:.2f}x** the reference; without the hang line {r['ratio_without_hang']:.2f}x"
            f" ({reference.wall_s + r['floor_without_hang_s']:.1f} s); with this run's {len(restarts)} relaunches after the"
            f" faults injected mid-run ({sum(restarts):.1f} s, relaunch -> first new progress) {with_restarts:.2f}x. A ratio of"
            f" 2.0x needs an undisturbed run of at least {floor:.1f} s{'' if not restarts else f' ({floor + sum(restarts):.1f} s with these relaunches)'}"
            f" for this schedule; this one took {reference.wall_s:.1f} s.")


def accounting(runbook: Outcome, reference: Outcome) -> str:
    lines = accounting_lines(runbook, reference)
    if not lines or not runbook.completed:
        return f"({runbook.name}: no accounting: the run did not complete or its timeline is missing)"
    extra = runbook.wall_s - reference.wall_s
    rows_ = [[what, f"{seconds:.1f}", f"{100 * seconds / extra:.0f}%" if extra else "-"] for what, seconds in lines]
    rows_.append([f"**{runbook.name} wall {runbook.wall_s:.1f} s - reference wall {reference.wall_s:.1f} s**",
                  f"**{extra:.1f}**", "100%"])
    return common.table([f"{runbook.name}: where the extra seconds went", "s", "share"], rows_, right={1, 2})


def ratio_goal(runbook: Outcome, warm: Outcome | None, reference: Outcome) -> str:
    parts = []
    for o in filter(None, [runbook, warm]):
        if o.completed and reference.wall_s:
            ratio = o.wall_s / reference.wall_s
            parts.append(f"{o.name} {ratio:.2f}x ({'met' if ratio <= 2.0 else '**missed**'})")
    return "; ".join(parts) or "no completed runbook run"


def warm_text(warm: Outcome | None, reference: Outcome) -> str:
    if warm is None:
        return ""
    flags = warm.timeline.get("warm_launches") or []
    which = ", ".join(f"{n} {'warm' if w else '**cold**'}" for n, w in enumerate(flags, 1))
    return ("\n(b') is (b) with `trainer.warm_spare: true`: a launch is a spare interpreter that imported torch,"
            " lightning, litgpt and litdata ahead (the first while the watcher started up, each next one from its"
            " predecessor's start, waiting under SCHED_IDLE at nice +10)" + (f"; launches: {which}" if which else "")
            + f". Goals (issue 7) for (b'): {goals(warm, reference)}.\n")
