"""A chained traceback's signature comes from the LAST exception Python prints (the one that ended the
process), not from the first one of the chain: `raise ... from err` and an exception raised while handling
another both print the earlier traceback first."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from engine.records.signature import find_exception, signature_of

_CAUSE = """
    def load(path):
        raise FileNotFoundError(2, "No such file or directory", path)

    try:
        load("/data/shard-0007.bin")
    except FileNotFoundError as err:
        raise RuntimeError("could not open the dataset of 12 shards") from err
"""
_DURING = """
    try:
        {}["learning_rate"]
    except KeyError:
        raise ValueError("config lacks a learning rate at step 40")
"""


def _stderr_of(code: str) -> list[str]:
    """The traceback a real Python process prints for `code` (it must fail)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, done
    return done.stderr.splitlines()


@pytest.mark.parametrize("code, separator, first, last, message", [
    (_CAUSE, "The above exception was the direct cause of the following exception:",
     "FileNotFoundError", "RuntimeError", "could not open the dataset of 12 shards"),
    (_DURING, "During handling of the above exception, another exception occurred:",
     "KeyError", "ValueError", "config lacks a learning rate at step 40"),
], ids=["raise-from", "during-handling"])
def test_a_chained_traceback_is_known_by_its_last_exception(code, separator, first, last, message):
    tail = _stderr_of(code)
    assert separator in tail and sum(line.startswith("Traceback (most recent call last):") for line in tail) == 2
    assert any(line.startswith(first + ":") for line in tail)          # the first exception is printed too

    assert find_exception(tail) == (last, message, f"{last}: {message}")
    # the same behind torch.distributed's rank prefix, and with lines a trainer prints after the traceback
    ranked = [f"[rank0]: {line}" for line in tail] + ["[rank0]: Epoch 3 | iter 40"]
    assert find_exception(ranked) == (last, message, f"{last}: {message}")

    sig = signature_of({"trainer": {"alive": False, "exit_code": 1}, "tail": tail, "metrics": {"step": 40}})
    assert sig.exception == last and sig.log_line == f"{last}: {message}"
    assert sig.message == message.replace("12", "<n>").replace("40", "<n>")


def test_the_chain_and_its_last_exception_alone_share_a_signature():
    """The earlier exception of the chain does not make the failure different from one raised alone."""
    chained = _stderr_of(_CAUSE)
    alone = _stderr_of('raise RuntimeError("could not open the dataset of 31 shards")')
    sig = lambda tail: signature_of({"trainer": {"alive": False, "exit_code": 1}, "tail": tail}).id  # noqa: E731
    assert sig(chained) == sig(alone)
    assert sig(chained) != sig(_stderr_of('raise FileNotFoundError(2, "No such file or directory", "/data/x.bin")'))
