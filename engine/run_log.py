"""docs/run-log.md grows by itself: one entry per incident, appended from an editable Jinja2 template.

Earlier entries and a human's own notes are never rewritten: we only ever append, in one write,
fsynced, so a crash cannot leave half an entry followed by more text.
"""

from __future__ import annotations

from pathlib import Path

from engine.expressions import render_template

from engine.write_trouble import append_whole

DEFAULT_TEMPLATE = """
### {{ incident.id }} — {{ incident.playbook }} ({{ incident.outcome }})

- **When:** {{ incident.opened_at_iso }} (detected at step {{ incident.step_at_failure if incident.step_at_failure is not none else "?" }})
- **Symptom:** {{ incident.symptom }}
- **What was done:** {% for a in incident.actions %}{{ a.verb }} ({{ "ok" if a.ok else "failed" }}: {{ a.summary }}){% if not loop.last %}; {% endif %}{% else %}nothing{% endfor %}
- **Outcome:** {{ incident.outcome }}{% if incident.resumed_from %}, resumed from step {{ incident.resumed_step }}{% endif %}{% if incident.config_changes %}; config changed: {{ incident.config_changes }}{% endif %}
- **Lost compute:** {{ incident.steps_lost if incident.steps_lost is not none else "?" }} optimizer steps, {{ incident.tokens_lost if incident.tokens_lost is not none else "?" }} tokens, {{ "%.1f" | format(incident.recovery_seconds or 0) }} s from detection to {{ "training again" if incident.first_progress_at is defined and incident.first_progress_at is not none else "the end of the recovery" }}{% if incident.trainer_restart_seconds is defined and incident.trainer_restart_seconds is not none %} (runbook {{ "%.1f" | format(incident.runbook_seconds) }} s, trainer restart {{ "%.1f" | format(incident.trainer_restart_seconds) }} s){% endif %}
{%- if incident.lesson %}
- **Lesson:** {{ incident.lesson }}
{%- endif %}
"""

HEADER = """# Run log

Every incident runbook handled, appended automatically (one entry each). Add your own notes
anywhere: runbook only ever appends.
"""



def render_entry(incident: dict, template_path: Path | None = None) -> str:
    """The entry's text. The template is the user's (run_log_template): it renders in the playbooks'
    sandbox, under the same budgets, so a hostile one fails with a sentence instead of hanging."""
    source = template_path.read_text(encoding="utf-8") if template_path else DEFAULT_TEMPLATE
    return render_template(source, {"incident": incident})


def entry_marker(incident_id: str) -> str:
    """An HTML comment before each entry (invisible in the rendered page): a watcher restarted after
    appending but before journaling it finds the entry there and does not append it twice."""
    return f"<!-- runbook:{incident_id} -->"


def append_entry(run_log: Path, incident: dict, template_path: Path | None = None) -> bool:
    """Append the incident's entry once; False when the run log already has it."""
    marker = entry_marker(str(incident.get("id")))
    if run_log.is_file() and marker.encode() in run_log.read_bytes():
        return False
    text = "\n" + marker + render_entry(incident, template_path)  # render first: a template error writes nothing
    run_log.parent.mkdir(parents=True, exist_ok=True)
    if not run_log.exists() or run_log.stat().st_size == 0:
        text = HEADER + text
    elif not run_log.read_bytes().endswith(b"\n"):
        text = "\n" + text
    append_whole(run_log, text.encode("utf-8"))   # a full disk: all of the entry or none of it (engine/write_trouble.py)
    return True
