"""The exit normalisation's edges, written against the mutants benchmarks/bench_mutation.py found alive:
each test names the bug it catches (engine/core/exit_codes.py)."""

from __future__ import annotations

import pytest

from engine.core.exit_codes import MAX_LINE, effective_exit, rank_exit_from_log, signal_from_code


@pytest.mark.parametrize("code,signal", [(254, "SIGINT"), (249, "SIGBUS"), (253, None), (248, None)])
def test_exactly_the_signals_a_trainer_dies_of_are_read_from_the_8_bit_wrap(code, signal):
    # sys.exit(-2) is 254: SIGINT; 253 (-3, SIGQUIT) and 248 (-8, SIGFPE) are no trainer's death here
    assert signal_from_code(code) == signal


def test_the_shell_range_starts_at_129():
    assert signal_from_code(129) == "SIGHUP" and signal_from_code(128) is None


def test_a_launcher_line_is_read_on_its_first_max_line_characters_only():
    report = "exitcode: -9"
    inside = "x" * (MAX_LINE - len(report) - 1) + " " + report     # ends at character MAX_LINE
    cut = "x" * (MAX_LINE - len(report)) + " " + report            # its last digit is character MAX_LINE + 1
    assert rank_exit_from_log([inside]) == (-9, "SIGKILL")
    assert rank_exit_from_log([cut]) is None


def test_lines_that_are_no_launcher_report_are_passed_over():
    assert rank_exit_from_log(["Epoch 1 | iter 4 step 1 | loss train: 6.4", "exitcode  : -9 (pid: 3309)", "done"]) == (-9, "SIGKILL")
    assert rank_exit_from_log(["nothing here", "srun: error: n1: task 0: Segmentation fault"]) == (None, "SIGSEGV")
    assert rank_exit_from_log(["nothing", "still nothing"]) is None


def test_a_signal_stated_alone_is_the_failure():
    assert rank_exit_from_log(["traceback : Signal 9 (SIGKILL) received by PID 36071"]) == (-9, "SIGKILL")
    assert rank_exit_from_log(["Signal 15 (SIGTERM) received by PID 1", "exitcode : 1"]) == (-15, "SIGTERM")


def test_the_root_cause_wins_over_the_failures_printed_before_it():
    lines = ["[1]:", "  exitcode  : 1 (pid: 10)", "Root Cause (first observed failure):", "[0]:", "  exitcode  : -9 (pid: 9)",
             "  exitcode  : -15 (pid: 8)"]
    assert rank_exit_from_log(lines) == (-9, "SIGKILL")


def test_a_clean_exit_never_takes_a_signal_from_the_log():
    assert effective_exit(0, None, ["exitcode : -9 (pid: 1)"]) == (0, None)
    assert effective_exit(None, None, ["exitcode : -9 (pid: 1)"]) == (None, None)
    assert effective_exit(1, None, ["exitcode : -9 (pid: 1)"]) == (1, "SIGKILL")
    assert effective_exit(1, None, ["exitcode : 3 (pid: 1)"]) == (1, None)


def test_a_launcher_without_a_report_leaves_the_exit_as_it_is():
    assert effective_exit(1, None, ["Traceback (most recent call last):", "RuntimeError: boom"]) == (1, None)


def test_the_notice_save_exit_is_ex_tempfail_and_the_one_the_preemption_playbook_claims():
    import os

    from engine.core.exit_codes import SAVED_ON_NOTICE
    from engine.language.clauses import walk
    from engine.language.loader import load_playbooks
    from tests.conftest import REPO

    assert SAVED_ON_NOTICE == os.EX_TEMPFAIL == 75
    [preemption] = [p for p in load_playbooks([REPO / "playbooks"]) if p.name == "preemption"]
    codes = {code for _, clause in walk(preemption.match) if clause.kind == "exit" for code in clause.exit.codes}
    assert SAVED_ON_NOTICE in codes, codes
