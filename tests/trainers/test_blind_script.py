"""A user's script that never calls runbook.sdk is supervised blind: runbook says so once, with what to add
(issue 44 item 6). A real `runbook watch` of a script that prints its own progress lines only."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, stop_process
from tests.trainers.projects import TRAINERS, make_project

pytestmark = pytest.mark.slow

OWN_LINES_ONLY = """
import time
for step in range(1, 50):
    print(f"epoch 0 step {step} loss {4.0 - step / 100:.3f}", flush=True)   # its own wording, not runbook's
    time.sleep(0.1)
"""


def test_a_script_that_prints_no_runbook_line_is_warned_about_once(tmp_path):
    project = make_project(tmp_path / "project", TRAINERS["script"])
    (project.root / "train.py").write_text(OWN_LINES_ONLY)
    project.set(trainer={"command": ["{python}", "train.py"]}, watch={"no_contract_warning_s": 2, "poll_interval_s": 0.2})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})
    try:
        watcher.wait(timeout=120)
    finally:
        stop_process(watcher)
    output = project.watch_output()
    assert output.count("but no line runbook reads") == 1, output
    assert "sdk.progress(step, loss)" in output
    assert '"kind": "blind_launch"' in (project.run_dir / "journal.jsonl").read_text()
