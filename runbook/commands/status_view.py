"""PURE. `runbook status`'s text and exit code from the dict status_cmd.gather() reads off the run folder
(the same dict `--json` prints)."""

from __future__ import annotations

import time

from runbook.exit_codes import STATUS_CODES, ExitCode
from runbook.shown_values import field_text, step_text


def _clock(epoch: float | None) -> str:
    return "-" if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def render_slurm(slurm: dict) -> list[str]:
    from engine.cluster.sacct import AllocationEnd, describe

    allocations = slurm["allocations"]
    jobs = ", ".join(slurm["job_ids"])
    lines = [f"slurm     job {jobs}" + (f", submitted {_clock(slurm['submitted_at'])}" if slurm["submitted_at"] else "")
             + f"; {len(allocations)} allocation(s)"]
    for a in allocations:
        ended = a["ended"] or "running (or ended without a record yet)"
        lines.append(f"          job {a['job_id']} restart {a['restart']} on {a['node']}: {_clock(a['started_at'])} -> "
                     f"{_clock(a['ended_at'])}, {ended}" + (f" ({a['scheduler_said']})" if a["scheduler_said"] else "")
                     + (f"; {describe(AllocationEnd(**a['sacct']))}" if a.get("sacct") else ""))
    return lines


def _number(value: object, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def render(status: dict) -> list[str]:
    from runbook.report import duration

    s = status
    lines = [f"run       {s['run_dir']}  ({s['config']})"]
    state = s["state"]
    watcher, trainer = s["watcher"], s["trainer"]
    note = ""
    if state in ("running", "starting", "incident", "recovering") and not watcher["running"]:
        note = "  (no watcher holds the run folder: it died or was killed; `runbook watch` re-attaches and continues)"
    lines.append(f"state     {state}{note}")
    if s["last_transition"]:
        t = s["last_transition"]
        when = f"at an invalid time ({t['time_invalid']})" if t.get("time_invalid") else f"{duration(t['seconds_ago'])} ago"
        lines.append(f"          last change {when}: {t['from']} -> {t['to']} ({t['reason']})")
    if watcher.get("note") and watcher["running"]:   # the lock is taken, but its pid is stale
        lines.append(f"watcher   holds the run folder's lock ({watcher['note']})")
    else:
        lines.append(f"watcher   {'running, pid ' + str(watcher['pid']) if watcher['running'] else 'not running'}"
                     + (f" ({watcher['note']})" if watcher.get("note") else ""))
    if trainer["alive"]:
        how = (f"alive under watcher pid {watcher['pid']}" if trainer["supervised"]
               else "alive, UNSUPERVISED (no watcher: `runbook watch` re-attaches to it)")
    elif trainer.get("pid_taken_by_another_process"):
        how = f"not running (pid {trainer['pid']} now belongs to another process: {trainer['why']})"
    else:
        how = "not running"
    lines.append(f"trainer   {how}{', pid ' + str(trainer['pid']) if trainer['pid'] else ''}; "
                 f"{trainer['launches']} launch(es)")
    p = s["progress"]
    if p:
        eta = duration(p["eta_seconds"]) if trainer["alive"] else "- (trainer not running)"
        if p["step"] >= p["total_steps"]:
            eta = "done"
        lines.append(f"step      {p['step']} of {p['total_steps']} ({_number(p['percent'], '{:.0f}')}%)   ETA {eta}")
        lines.append(f"loss      train {_number(p['loss'], '{:.4f}')}   val {_number(p['val_loss'], '{:.4f}')}"
                     + (f"   final val {p['final_val_loss']:.4f}" if p["final_val_loss"] is not None else ""))
        lines.append(f"speed     {_number(p['tokens_per_sec'], '{:,.0f}')} tok/s (recent iterations)   "
                     f"log last written {duration(p['seconds_since_log_written'])} ago")
    else:
        lines.append("step      no progress line logged yet")
    if s.get("heartbeat_invalid"):
        lines.append(f"heartbeat {s['heartbeat_invalid']}: not counted")
    elif s["heartbeat"]:
        b = s["heartbeat"]
        step = f"invalid ({b['step_invalid']})" if b.get("step_invalid") else step_text(b["step"])
        lines.append(f"heartbeat {duration(b['age_seconds'])} ago: step {step}, trainer alive {b['trainer_alive']}"
                     + (" (it exited)" if b.get("trainer_exited") else ""))
    if s.get("journal_tail"):
        lines.append(f"journal   {s['journal_tail']}")
    d = s["disk"]
    lines.append(f"disk      {d['free_bytes'] / 1e9:,.1f} GB free ({d['free_percent']:.0f}%) under {s['out_dir']}")
    c = s["checkpoints"]
    kept = ", ".join(str(step) + ("" if step in c["sealed_steps"] else " (unsealed)") for step in c["steps"]) or "none"
    lines.append(f"ckpts     {kept}; last -> {_number(c['last_link_step'], 'step {}')}"
                 + ("; final/ written" if c["final"] else ""))
    env = s.get("environment") or {}
    if env.get("in_force"):   # what remedies add to every later launch (set_env), diagnostic ones until a healthy launch
        lines.append("env       " + ", ".join(f"{k}={v}" + (" (diagnostic)" if k in env["diagnostic"] else "")
                                             for k, v in sorted(env["in_force"].items())))
    for e in (env.get("effects") or [])[-3:]:
        lines.append(f"          {', '.join(e.get('names') or [])} ({e.get('incident')}): "
                     f"{_number(e.get('tokens_per_sec_before'), '{:,.0f}')} -> "
                     f"{_number(e.get('tokens_per_sec_after'), '{:,.0f}')} tok/s")
    n = s.get("notices") or {}
    if n.get("pending") or n.get("parked"):
        lines.append(f"notices   {n['pending']} pending (the receivers' outboxes)"
                     + (f", oldest queued {duration(n['oldest_age_seconds'])} ago" if n["pending"] else "")
                     + (f"; {n['parked']} set aside in an outbox's failed/ (rejected by the receiver or unreadable)" if n.get("parked") else "")
                     + ("; `runbook notify --flush` delivers them" if n["pending"] else ""))
    if s.get("slurm"):
        lines += render_slurm(s["slurm"])
    i = s["incidents"]
    summary = ", ".join(f"{n} {o}" for o, n in sorted(i["by_outcome"].items()))
    lines.append(f"incidents {i['count']}" + (f" ({summary})" if summary else "")
                 + (f"; OPEN: {i['open']}" if i["open"] else ""))
    if i["last"]:
        r = i["last"]
        lines.append(f"          last: {r['id']} {r['playbook']} {r['outcome']} at step {field_text(r, 'step_at_failure')}"
                     f", steps lost {field_text(r, 'steps_lost')}, recovery {_number(r['recovery_seconds'], '{:.1f} s')}")
    return lines


def status_code(status: dict) -> ExitCode:
    """PURE. The exit code that tells the run's phase apart (README's table): completed 0, escalated 4,
    stopped 7 (resumable), running under a watcher 13, unfinished with no watcher 12 (it failed or was killed).
    A trainer alive with no watcher is 12 whatever state was recorded last: a watcher killed between launching
    the trainer and journaling "running" leaves "stopped" behind, and the unsupervised trainer is the news."""
    # The heartbeat plays no part: an invalid one (status["heartbeat_invalid"]) is no heartbeat, and so is a valid one.
    trainer = status.get("trainer") or {}
    if trainer.get("alive") and not trainer.get("supervised") and not status["watcher"]["running"]:
        return ExitCode.WATCHER_FAILED
    if status["state"] in STATUS_CODES:
        return STATUS_CODES[status["state"]]
    return ExitCode.RUNNING if status["watcher"]["running"] else ExitCode.WATCHER_FAILED
