"""What one run-log entry says, in words a person reads: a short post-mortem of one incident.

PURE: the incident record (JSON) and where the run log is in; plain data out, for the entry template
(engine/records/run_log.py) and for a user's own template (as `entry`). Rules:

- what was done lists only actions that ran (a step whose `if:` was false did not run);
- nothing unknown is printed as a value ("?" steps, a step before 0): an unknown part is left out;
- the outcome is said as it was: a recovery whose check failed (a `wait_for` that timed out) did not
  fix anything, whatever the record's outcome field says;
- a repeat of an earlier incident's signature refers to that entry instead of repeating it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.records.signature import repeat_phrase, signature_of_record

MAX_SUMMARY = 600          # an action's summary can name a rank, a pid and a process state: keep it whole
MAX_LOG_LINE = 300


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _clip(text: Any, limit: int = MAX_SUMMARY) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def ran_actions(incident: dict) -> list[dict]:
    return [a for a in incident.get("actions") or [] if isinstance(a, dict) and not a.get("skipped")]


def relaunch_failed(incident: dict) -> bool:
    """A recovery whose relaunch failed again before training (or whose remedy was reverted): the watcher went
    on with the next incident, nobody was called for this one."""
    return bool(incident.get("reverted")) or any(str(n).startswith("not recovered: ") for n in incident.get("notes") or [])


def outcome_words(incident: dict) -> str:
    """The outcome in honest words."""
    outcome = incident.get("outcome")
    ran = ran_actions(incident)
    failed = [a for a in ran if not a.get("ok")]
    if outcome == "escalated":
        reason = incident.get("escalation_reason") or incident.get("decision_reason")
        return "escalated to a human" + (f": {_clip(reason)}" if reason else "")
    if outcome == "failed" and relaunch_failed(incident):
        resumed = _int(incident.get("resumed_step"))
        where = f"resumed from step {resumed}" if resumed else "restarted from scratch"
        if incident.get("reverted"):
            return f"not recovered: {where}, but {_clip(incident['reverted'])}; the next incident retried without it"
        return f"not recovered: {where}, but the trainer failed again before making progress; the next incident took over"
    if outcome == "failed":
        where = f" at {failed[0].get('verb')} ({_clip(failed[0].get('summary', ''))})" if failed else ""
        return f"the recovery failed{where}; handed to a human"
    if outcome == "open":
        return "still open when this entry was written"
    resumed = _int(incident.get("resumed_step"))
    if resumed is not None:
        words = f"recovered: resumed from step {resumed}" if resumed > 0 else "recovered: restarted from scratch"
        if incident.get("first_progress_at") is not None:
            return words + ", training again"
        if any("failed again" in str(n) for n in incident.get("notes") or []):
            return words + ", but the trainer failed again before making progress"
        return words + " (no progress seen yet)"
    if failed:
        first = failed[0]
        return f"not fixed: {first.get('verb')} failed ({_clip(first.get('summary', ''))}); the run went on as it was"
    return "resolved without a restart" + (f": {_clip(ran[-1].get('summary'))}" if ran and ran[-1].get("summary") else "")


def cost_words(incident: dict) -> str | None:
    parts = []
    steps, tokens = _int(incident.get("steps_lost")), _int(incident.get("tokens_lost"))
    if steps is not None and steps >= 0:
        parts.append(f"{steps:,} optimizer step(s)" + (f" ({tokens:,} tokens)" if tokens is not None and tokens >= 0 else "")
                     + " lost")
    recovery = _seconds(incident.get("recovery_seconds"))
    if recovery is not None and incident.get("outcome") == "recovered":
        to = "training again" if incident.get("first_progress_at") is not None else "the end of the recovery"
        text = f"{recovery:.1f} s from detection to {to}"
        runbook_s, restart_s = _seconds(incident.get("runbook_seconds")), _seconds(incident.get("trainer_restart_seconds"))
        if runbook_s is not None and restart_s is not None:
            text += f" (runbook {runbook_s:.1f} s, trainer restart {restart_s:.1f} s)"
        parts.append(text)
    if incident.get("outcome") in ("escalated", "failed") and not relaunch_failed(incident):
        step = _int(incident.get("step_at_failure"))
        parts.append("the run stopped" + (f" at step {step}" if step is not None and step >= 0 else "")
                     + " until a person acts")
    return "; ".join(parts) or None


def _link(target: Path | None, run_log: Path | None) -> str | None:
    if target is None or run_log is None:
        return None
    try:
        return Path(os.path.relpath(target, run_log.parent)).as_posix()
    except ValueError:          # another drive
        return target.as_posix()


def record_path(incident: dict, run_log: Path | None) -> Path | None:
    """Where the record is, from the record's own config (run_dir and run_log relative to one project folder)."""
    config = v if isinstance(v := incident.get("config_before"), dict) else {}
    run_dir, log_key = config.get("run_dir"), config.get("run_log")
    if not isinstance(run_dir, str) or run_log is None or not isinstance(incident.get("id"), str):
        return None
    run_dir_path = Path(run_dir)
    if not run_dir_path.is_absolute():
        if not isinstance(log_key, str) or Path(log_key).is_absolute():
            return None
        parts = Path(log_key).parts
        if tuple(run_log.parts[-len(parts):]) != parts:
            return None
        run_dir_path = Path(*run_log.parts[:-len(parts)]) / run_dir_path
    return run_dir_path / "incidents" / f"{incident['id']}.json"


def playbook_path(incident: dict) -> Path | None:
    source = incident.get("playbook_source")
    if not isinstance(source, str) or source.startswith("<"):
        return None
    file, _, line = source.rpartition(":")
    return Path(file if line.isdigit() and file else source)


def skipped_words(incident: dict) -> str | None:
    """PURE. The data window a skip_data action skipped, and what the relaunch's trainer said it left out."""
    skipped = incident.get("data_skipped")
    if not isinstance(skipped, dict):
        return None
    steps, positions = skipped.get("steps"), skipped.get("positions")
    if not (isinstance(steps, list) and len(steps) == 2 and isinstance(positions, list) and len(positions) == 2):
        return None
    words = (f"steps {steps[0]}-{steps[1]} (data positions {positions[0]}-{positions[1]}: {skipped.get('batches')} "
             f"batches, {_int(skipped.get('tokens')) or 0:,} tokens)")
    reports = [r for r in skipped.get("trainer_reports") or [] if isinstance(r, dict)][:8]
    if reports:
        said = "; ".join(", ".join(f"{k} {v}" for k, v in r.items()) for r in reports)
        words += f"; the trainer left out: {_clip(said, MAX_LOG_LINE)}"
    return words


def entry_view(incident: dict, run_log: Path | None = None) -> dict:
    """Plain data for the entry template."""
    step = _int(incident.get("step_at_failure"))
    signature = signature_of_record(incident)
    log_line = _clip(signature.log_line, MAX_LOG_LINE) if signature and signature.log_line else None
    same_as = incident.get("same_as") if isinstance(incident.get("same_as"), str) else None
    done = []
    for action in ran_actions(incident):
        mark = "" if action.get("ok") else "FAILED: "
        done.append(f"{action.get('verb')} ({mark}{_clip(action.get('summary', ''))})")
    seen = "the trainer " + (signature.ending.replace("exit ", "exited with code ").replace("signal ", "was killed by ")
                             if signature and not signature.ending.startswith("alive") else "was running")
    if signature and signature.ending == "exit unknown":
        seen = "the trainer ended and how could not be learned"
    return {
        "id": incident.get("id"),
        "anchor": str(incident.get("id")),
        "playbook": incident.get("playbook"),
        "when": incident.get("opened_at_iso"),
        "step": step if step is not None and step >= 0 else None,
        "seen": seen,
        "symptom": incident.get("symptom"),
        "log_line": log_line,
        "evidence": log_line,   # log_line's old name, for run-log templates written before
        "signature": signature.id if signature else None,
        "signature_text": signature.text if signature else None,
        "repeat_of": same_as,
        "repeat_words": repeat_phrase(incident.get("playbook"), f"[{same_as}](#{same_as})") if same_as else None,
        "done": done,
        "outcome": outcome_words(incident),
        "headline": outcome_words(incident).split(":")[0].split(" (")[0],
        "cost": cost_words(incident),
        "data_skipped": skipped_words(incident),
        "config_changes": {k: v for k, v in (incident.get("config_changes") or {}).items()}
        if isinstance(incident.get("config_changes"), dict) else {},
        "notes": [_clip(n) for n in (incident.get("notes") or [])[:10] if isinstance(n, str)],
        "lesson": incident.get("lesson") or None,
        "playbook_link": _link(playbook_path(incident), run_log),
        "record_link": _link(record_path(incident, run_log), run_log),
    }


__all__ = ["cost_words", "entry_view", "outcome_words", "playbook_path", "ran_actions", "record_path", "skipped_words"]
