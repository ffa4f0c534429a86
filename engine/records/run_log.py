"""docs/run-log.md grows by itself: one entry per incident, appended from an editable Jinja2 template.

Earlier entries and a human's own notes are never rewritten: we only ever append, in one write,
fsynced, so a crash cannot leave half an entry followed by more text.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from engine.core.bounded_read import read_text_file
from engine.core.text_safety import for_run_log, redact_tree
from engine.core.write_trouble import append_whole
from engine.expr.expressions import render_template
from engine.records.run_log_entry import entry_view

# `entry` is engine/records/run_log_entry.py's view (honest words, only what ran); `incident` is the raw
# record, for a user's own template written before the view existed.
DEFAULT_TEMPLATE = """
### {{ entry.id }} — {{ entry.playbook }} ({{ entry.headline }}) <a id="{{ entry.anchor }}"></a>
{% if entry.repeat_of %}
- **Again:** {{ entry.repeat_words }} (`{{ entry.signature }}`), {{ entry.when }}{% if entry.step is not none %}, at step {{ entry.step }}{% endif %}
- **Outcome:** {{ entry.outcome }}
- **Done:** {{ entry.done | join("; ") if entry.done else "nothing ran" }}{% if entry.cost %}
- **Cost:** {{ entry.cost }}{% endif %}{% if entry.data_skipped %}
- **Data skipped:** {{ entry.data_skipped }}{% endif %}{% if entry.record_link %}
- **Record:** [{{ entry.id }}]({{ entry.record_link }}){% endif %}
{%- else %}
- **Seen:** {{ entry.when }}{% if entry.step is not none %}, at step {{ entry.step }}{% endif %}: {{ entry.seen }}. {{ entry.symptom }}{% if entry.log_line %}
- **Log line:** `{{ entry.log_line | replace("`", "'") }}`{% endif %}{% if entry.signature %}
- **Signature:** `{{ entry.signature }}`: `{{ entry.signature_text | replace("`", "'") }}`{% endif %}
- **Done:** {{ entry.done | join("; ") if entry.done else "nothing ran" }}{% if entry.config_changes %}; config changed: {% for key, change in entry.config_changes.items() %}{{ key }} {{ change[0] }} -> {{ change[1] }}{% if not loop.last %}, {% endif %}{% endfor %}{% endif %}
- **Outcome:** {{ entry.outcome }}{% if entry.cost %}
- **Cost:** {{ entry.cost }}{% endif %}{% if entry.data_skipped %}
- **Data skipped:** {{ entry.data_skipped }}{% endif %}{% if entry.notes %}
- **Notes:** {{ entry.notes | join("; ") }}{% endif %}{% if entry.lesson %}
- **Lesson:** {{ entry.lesson }}{% endif %}{% if entry.playbook_link or entry.record_link %}
- **Files:** {% if entry.playbook_link %}playbook [{{ entry.playbook }}]({{ entry.playbook_link }}){% endif %}{% if entry.playbook_link and entry.record_link %} · {% endif %}{% if entry.record_link %}record [{{ entry.id }}]({{ entry.record_link }}){% endif %}{% endif %}
{%- endif %}
"""

HEADER = """# Run log

Every incident runbook handled, appended automatically (one entry each). Add your own notes
anywhere: runbook only ever appends.
"""



def render_entry(incident: dict, template_path: Path | None = None, run_log: Path | None = None) -> str:
    """The entry's text. The template is the user's (run_log_template): it renders in the playbooks'
    sandbox, under the same budgets, so a hostile one fails with a sentence instead of hanging.
    `run_log`: where the entry goes, so its links to the playbook and the record are relative to it."""
    # A regular UTF-8 file of at most MAX_TEMPLATE_BYTES, stat'ed before it is opened: a FIFO or
    # /dev/zero as run_log_template is refused in one sentence instead of blocking the watcher.
    source = read_text_file(template_path, MAX_TEMPLATE_BYTES) if template_path else DEFAULT_TEMPLATE
    # Every text of the record is the trainer's as much as ours (log lines, a command's output): secrets
    # redacted, control characters neutralised, and nothing that could open an HTML comment or forge a
    # marker (engine/core/text_safety.py). The template's own text is kept as its author wrote it.
    safe = redact_tree(incident, for_run_log)
    return render_template(source, {"incident": safe, "entry": entry_view(safe, run_log)})


def entry_marker(incident_id: str) -> str:
    """An HTML comment before each entry (invisible in the rendered page): a watcher restarted after
    appending but before journaling it finds the entry there and does not append it twice. Only a line
    that is the marker and nothing else counts, and entry text cannot hold one (`<!` is escaped)."""
    return f"<!-- runbook:{incident_id} -->"


MAX_LINE_PIECE = 64 * 1024   # the run log is read in pieces of at most this: a 1 GB line costs no 1 GB


def has_entry(run_log: Path, incident_id: str) -> bool:
    """Whether the run log holds the incident's marker as a line of its own (runbook writes it so)."""
    want = entry_marker(incident_id).encode()
    try:
        with open(run_log, "rb") as fh:
            at_line_start = True
            while piece := fh.readline(MAX_LINE_PIECE):
                whole_line = piece.endswith(b"\n") or not fh.peek(1)
                if at_line_start and whole_line and piece.rstrip(b" \t\r\n") == want:
                    return True
                at_line_start = piece.endswith(b"\n")
    except FileNotFoundError:
        return False
    return False


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


MAX_TEMPLATE_BYTES = 256 * 1024


def check_run_log_file(run_log: Path) -> None:
    """The run log is a regular file or does not exist yet; anything else (a FIFO would block the
    append, /dev/zero would be read forever, a folder) is refused before it is opened."""
    try:
        info = os.stat(run_log)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"run_log {run_log} is not a regular file (a FIFO, device or folder); not written")


def append_entry(run_log: Path, incident: dict, template_path: Path | None = None) -> bool:
    """Append the incident's entry once; False when the run log already has it."""
    check_run_log_file(run_log)
    incident_id = str(incident.get("id"))
    if has_entry(run_log, incident_id):
        return False
    entry = render_entry(incident, template_path, run_log)   # render first: a template error writes nothing
    text = "\n" + entry_marker(incident_id) + "\n" + entry.lstrip("\n")   # the marker on a line of its own
    run_log.parent.mkdir(parents=True, exist_ok=True)
    if not run_log.exists() or run_log.stat().st_size == 0:
        text = HEADER + text
    elif not _ends_with_newline(run_log):
        text = "\n" + text
    append_whole(run_log, text.encode("utf-8"))   # a full disk: all of the entry or none of it (engine/core/write_trouble.py)
    return True
