"""Exit codes and signals, normalised once (engine/core/exit_codes.py)."""

from __future__ import annotations

import pytest

from engine.core.exit_codes import effective_exit, normalise, popen_code, rank_exit_from_log, signal_from_code


@pytest.mark.parametrize("code,signal", [
    (-9, "SIGKILL"), (-15, "SIGTERM"), (-6, "SIGABRT"), (-11, "SIGSEGV"),   # Popen: killed by signal N
    (137, "SIGKILL"), (143, "SIGTERM"), (134, "SIGABRT"), (139, "SIGSEGV"), # a shell: 128 + N
    (247, "SIGKILL"), (241, "SIGTERM"), (250, "SIGABRT"), (245, "SIGSEGV"), # sys.exit(-N): 256 - N
    (0, None), (1, None), (2, None), (75, None), (128, None), (255, None),  # plain codes; 255 is exit(-1)
    (None, None),
])
def test_signal_from_code(code, signal):
    assert signal_from_code(code) == signal


def test_normalise_keeps_the_code_and_a_given_signal():
    assert normalise(137) == (137, "SIGKILL")
    assert normalise(1, "SIGTERM") == (1, "SIGTERM")
    assert normalise(1, "NOT-A-SIGNAL") == (1, None)
    assert popen_code(137) == -9 and popen_code(247) == -9 and popen_code(-15) == -15 and popen_code(1) == 1


TORCHRUN_BLOCK = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 37882)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 7 (local_rank: 7)
  exitcode  : -9 (pid: 3309)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 3309""".splitlines()


def test_torchrun_root_cause_is_the_failing_rank():
    assert rank_exit_from_log(TORCHRUN_BLOCK) == (-9, "SIGKILL")


@pytest.mark.parametrize("line,expected", [
    ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 4 (pid: 899509) of binary: /usr/bin/python", (-9, "SIGKILL")),
    ("failed (exitcode: -11) local_rank: 0 (pid: 1299143) of binary: python", (-11, "SIGSEGV")),
    ("rank2 (local rank: 2)exitcode: -9 (pid: 36071)error file: <N/A>", (-9, "SIGKILL")),
    ("[ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py'] exits with return code = -9", (-9, "SIGKILL")),
    ("[ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py'] exits with return code = 1", (1, None)),
    ("srun: error: gpu001: task 0: Killed", (None, "SIGKILL")),
    ("srun: error: nid01934: tasks 2,4-5,7: Terminated", (None, "SIGTERM")),
    ("srun: error: n1: tasks 2-3: Exited with exit code 1", (1, None)),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL", (-9, "SIGKILL")),
    ("Exception: process 3 terminated with signal SIGKILL", (-9, "SIGKILL")),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGABRT", (-6, "SIGABRT")),
    ("-- Process 0 terminated with the following error:", None),
    ("RuntimeError: CUDA out of memory", None),
])
def test_launcher_lines(line, expected):
    assert rank_exit_from_log([line]) == expected


def test_effective_exit_reads_the_rank_signal_only_for_a_launcher_exit_without_one():
    assert effective_exit(1, None, TORCHRUN_BLOCK) == (1, "SIGKILL")
    assert effective_exit(-15, "SIGTERM", TORCHRUN_BLOCK) == (-15, "SIGTERM")   # its own signal wins
    assert effective_exit(0, None, TORCHRUN_BLOCK) == (0, None)
    assert effective_exit(None, None, TORCHRUN_BLOCK) == (None, None)             # unknown stays unknown
    assert effective_exit(1, None, ["exits with return code = 1"]) == (1, None)


def test_bounded_on_a_huge_line():
    line = "exitcode" + " " * 1_000_000 + ": -9"
    assert rank_exit_from_log([line]) is None
