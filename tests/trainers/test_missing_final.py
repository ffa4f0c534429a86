"""A script that trains all its steps and exits 0 without saving final/ (an HF script without
`sys.exit(RunbookCallback.finish(trainer))`) was escalated as "exit 0, no playbook matched", with no hint of
what was missing. A real `runbook watch` of a real script (runbook/sdk.py's lines, no torch)."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import REPO, stop_process
from tests.trainers.projects import STEPS, TRAINERS, make_project

pytestmark = pytest.mark.slow   # a real watcher (conftest's rule)

FORGETS_FINAL = textwrap.dedent("""\
    import sys
    from runbook import sdk

    sdk.watch_notice()
    for step in range(1, int(sys.argv[1]) + 1):
        sdk.progress(step, 2.0 / step)
    # no sdk.saving(<out_dir>/final) and no save: the run "finished" with nothing to show for it
""")


def test_an_exit_0_at_the_last_step_without_final_says_what_the_script_is_missing(tmp_path):
    project = make_project(tmp_path, TRAINERS["script"])
    (tmp_path / "train.py").write_text(FORGETS_FINAL)
    project.set(trainer={"command": ["{python}", "train.py", "{max_steps}"]})
    watcher = project.watch(env={"PYTHONPATH": str(REPO)})   # the script imports this checkout's runbook.sdk
    try:
        assert watcher.wait(timeout=120) == 4, project.watch_output()   # escalated
    finally:
        stop_process(watcher)
    [incident] = project.incidents()
    assert incident["playbook"] == "missing-final", incident
    said = project.watch_output()
    assert (f"the trainer exited 0 at step {STEPS} of {STEPS} but wrote no final/ (checkpoint `final`): does the script "
            "end with `sys.exit(RunbookCallback.finish(trainer))`") in said, said
    assert f"{project.out_dir}/final" in said or "checkpoints/pretrain/final" in said
