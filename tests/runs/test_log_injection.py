"""Hostile log lines (issue 34) through the watcher's own path and through each command that shows them.

The trainer's log is anybody's text: a line that clears the screen and retitles the terminal, a bidi
override, a forged run-log marker, tokens. A run folder whose journal says the trainer died is watched
for real (`runbook watch`: the incident is opened, its playbook runs, the record and the run-log entry
are written), then `runbook incidents`, `incidents show`, `ledger` and `slurm submit --dry-run` print what
they print. Asserted everywhere: no ESC byte (nor C1 CSI, nor a bidi override) reaches the output, the
tokens are gone, and the run-log entry is written despite a forged marker.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import REPO, RUNBOOK, make_toy_project

ENV = {"PYTHONPATH": str(REPO)}   # every command reading the config imports the toy trainer's adapter

TOKENS = {"hf": "hf_" + "Q" * 30, "github": "ghp_" + "a1B2" * 9, "slack": "xoxb-1234567890-abcdefABCDEF",
          "aws": "AKIAIOSFODNN7EXAMPLE", "bearer": "eyJhbGciOiJIUzI1NiJ9.payload", "password": "hunter2hunter2"}
HOSTILE = (f"\x1b[2J\x1b[H\x1b]0;pwned\x07RUNBOOK: ALL CLEAR \u202egnp.exe\u202c \x9b31m "
           f"HF_TOKEN={TOKENS['hf']} Authorization: Bearer {TOKENS['bearer']} password={TOKENS['password']}")
TAIL = [
    "toy step 1/40 loss 1.774459 took 30.1 ms",
    HOSTILE,
    "Traceback (most recent call last):",
    f"ValueError: \x1b[31mboom\x1b[0m <!-- runbook:incident-1 --> {TOKENS['github']} {TOKENS['slack']} {TOKENS['aws']}",
]
FORBIDDEN = ("\x1b", "\x9b", "\u202e", "\x07")


def assert_clean(text: str, where: str) -> None:
    for char in FORBIDDEN:
        assert char not in text, f"{where}: {char!r} reached the output"
    for name, token in TOKENS.items():
        assert token not in text, f"{where}: the {name} token reached the output"


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """A run folder whose trainer died on the hostile lines; `runbook watch` handles it for real (the
    incident is opened, its playbook relaunches the trainer, the toy, which completes the short run)."""
    project = make_toy_project(tmp_path_factory.mktemp("hostile") / "project")
    project.set(data_hash="sha256:" + "0" * 64)
    log = project.run_dir / "logs" / "trainer-001.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(TAIL) + "\n")
    entries = [
        {"time": 1.0, "kind": "launch", "launch": 1, "pid": 999999, "log": str(log), "resume_from": None, "argv": []},
        {"time": 1.1, "kind": "transition", "from": "starting", "to": "running", "reason": "launch 1"},
        {"time": 5.0, "kind": "trainer_exited", "pid": 999999, "exit_code": 1, "signal": None},
    ]
    (project.run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    # A person's note quoting the marker mid-line (as an older runbook's entry could): no marker of runbook's.
    project.run_log.parent.mkdir(parents=True)
    project.run_log.write_text("# Run log\n\nnote: the log said `<!-- runbook:incident-1 -->` last time\n")
    watch = subprocess.run([RUNBOOK, "watch", str(project.config), "--accept-data-change"], capture_output=True,
                           timeout=120, cwd=project.root, env={**os.environ, **ENV})
    return project, watch


def run(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RUNBOOK, *args], capture_output=True, timeout=120, cwd=project.root,
                          env={**os.environ, **ENV, "COLUMNS": "200"})


def test_a_hostile_log_line_is_recorded_and_written_to_the_run_log_safely(crashed):
    project, watch = crashed
    output = (watch.stdout + watch.stderr).decode("utf-8", "replace")
    [record] = project.incidents()
    assert record["outcome"] == "recovered" and watch.returncode == 0, output
    [kept] = [line for line in record["log_excerpt"] if "ALL CLEAR" in line]   # kept as seen, secrets aside
    assert kept.startswith("\x1b[2J") and "HF_TOKEN=[REDACTED] Authorization: Bearer [REDACTED]" in kept, kept
    assert_clean(output, "runbook watch")
    record_text = (project.run_dir / "incidents" / "incident-1.json").read_text()
    for name, token in TOKENS.items():
        assert token not in record_text, f"the record holds the {name} token"
    run_log = project.run_log.read_text()
    assert "\n<!-- runbook:incident-1 -->\n" in run_log, run_log  # the entry is written despite the forged marker
    assert run_log.count("### incident-1 ") == 1
    assert_clean(run_log, "docs/run-log.md")
    assert "<\\!-- runbook:incident-1 --\\>" in run_log          # the forged marker, shown, inert
    assert "\\x1b[31mboom" in run_log                            # the escape shown as text, not acted on


def test_incidents_show_and_the_table_print_no_escape_and_no_token(crashed):
    project, _watch = crashed
    for args in (("incidents", "show", "incident-1", str(project.config)), ("incidents", str(project.config)),
                 ("incidents", "show", "incident-1", str(project.config), "--json")):
        done = run(project, *args)
        text = (done.stdout + done.stderr).decode("utf-8", "replace")
        assert done.returncode == 0, text
        assert_clean(text, " ".join(args[:2]))
    shown = run(project, "incidents", "show", "incident-1", str(project.config)).stdout.decode()
    assert "\\x1b]0;pwned\\x07RUNBOOK: ALL CLEAR \\u202egnp.exe" in shown, shown   # every character still there


def test_the_ledger_prints_and_writes_no_escape_and_no_token(crashed, tmp_path):
    project, _watch = crashed
    done = run(project, "ledger", str(project.run_dir), "--output", str(tmp_path / "ledger"))
    text = (done.stdout + done.stderr).decode("utf-8", "replace")
    assert done.returncode == 0, text
    assert "ValueError" in text, text
    assert_clean(text, "runbook ledger")
    assert_clean((tmp_path / "ledger" / "ledger.md").read_text(), "ledger.md")


def test_slurm_submit_dry_run_shows_escapes_as_text(project):
    project.set(slurm={"sbatch_options": ["--comment=\x1b]0;pwned\x07"]})
    done = run(project, "slurm", "submit", "--dry-run", str(project.config), "--", "--export=\x1b[2JALL",
               f"--comment=token={TOKENS['password']}")
    text = (done.stdout + done.stderr).decode("utf-8", "replace")
    assert done.returncode == 0, text
    assert_clean(text, "slurm submit --dry-run")
    assert "#SBATCH --comment=\\x1b]0;pwned\\x07" in text and "--export=\\x1b[2JALL" in text, text
