"""The data windows a run skips (engine/core/data_windows.py, issue 48 item 1), the trainer side's mapping
(runbook.sdk.data_position) and the divergences a restarted watcher knows; the real run is
tests/runs/test_skip_data.py."""

from __future__ import annotations

import pytest

from engine.core import data_windows
from engine.core.data_windows import format_windows, parse, position, skip_steps
from tests.conftest import REPO


def test_a_skipped_window_shifts_every_later_step_past_it_and_windows_merge():
    assert [position(s, []) for s in (1, 11, 40)] == [1, 11, 40]
    windows, new = skip_steps([], 11, 16)
    assert new == (11, 16) and [position(s, windows) for s in (10, 11, 12)] == [10, 17, 18]
    windows, new = skip_steps(windows, 11, 12)          # the same steps again: the positions they train on now
    assert new == (17, 18) and windows == [(11, 18)] and position(11, windows) == 19
    windows, new = skip_steps(windows, 30, 30)
    assert windows == [(11, 18), (38, 38)] and position(30, windows) == 39
    assert parse(format_windows(windows)) == windows and parse("") == [] and parse(None) == []


@pytest.mark.parametrize("bad", ["5", "3-2", "0-4", "a-b", "1-2,x"])
def test_a_malformed_skip_value_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="RUNBOOK_DATA_SKIP"):
        parse(bad)


def test_the_sdk_maps_a_step_to_its_data_position_from_the_environment(monkeypatch):
    from runbook import sdk

    monkeypatch.setenv("RUNBOOK_DATA_SKIP", "11-16")
    assert [sdk.data_position(s) for s in (10, 11)] == [10, 17]
    monkeypatch.delenv("RUNBOOK_DATA_SKIP")
    assert sdk.data_position(11) == 11


def test_the_divergences_a_restarted_watcher_knows_are_the_journal_s():
    from engine.records.journal import rebuild

    entries = [{"kind": "divergence_rollback", "incident": "incident-1", "bad_step": 11},
               {"kind": "divergence_rollback", "incident": "incident-2", "bad_step": "11"},   # not runbook's: ignored
               {"kind": "divergence_rollback", "incident": "incident-3", "bad_step": 30}]
    assert rebuild(entries).divergences == [11, 30]



def test_a_trainers_report_of_what_it_skipped_is_read_back_bounded():
    """engine/core/data_windows.py's report line: what a trainer says it left out, read from its log by the
    watcher. A launcher's prefix is allowed; any other line, a malformed, non-object, oversized or deeply
    nested one is not a report (never an exception: it is a trainer's output)."""
    where = {"rank": 1, "files": [{"file": "1-junk.txt", "bytes": "0-8191"}]}
    line = data_windows.report_line(where)
    assert data_windows.parse_report(line) == where
    assert data_windows.parse_report(f"[rank1]: {line}") == where
    prefix = data_windows.REPORT_PREFIX
    for bad in ("runbook: data skipped", prefix + "{not json", prefix + "[1, 2]", prefix + '"text"',
                prefix + "[" * 1500, prefix + '{"a":' * 600 + "1" + "}" * 600,
                prefix + '{"a": "' + "x" * 3000 + '"}', "x" * 200 + line):
        assert data_windows.parse_report(bad) is None, bad[:80]
    long = data_windows.report_line({"rows": "1," * 5000})   # a trainer's over-long report is cut, still one object
    assert len(long) < len(prefix) + data_windows.MAX_REPORT_CHARS and set(data_windows.parse_report(long)) == {"cut"}


def test_indices_are_told_as_ranges_and_a_scattered_many_are_cut():
    assert data_windows.ranges([9, 5, 6, 7, 11, 12, 6]) == "5-7,9,11-12"
    assert data_windows.ranges([]) == ""
    scattered = data_windows.ranges(list(range(0, 400, 2)))
    assert scattered.startswith("0,2,4") and scattered.endswith("... (150 more ranges)"), scattered


def test_the_script_example_tells_the_files_and_byte_offsets_of_a_skipped_window(tmp_path):
    """examples/script/train.py --sequential: data position p is the p-th run of batch x block bytes of the files
    end to end, so a window's bytes are told by file, as `sdk.data_skipped(files=...)` reports them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("example_train", REPO / "examples" / "script" / "train.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    (tmp_path / "0-text.txt").write_bytes(b"a" * 250)
    (tmp_path / "1-junk.txt").write_bytes(b"b" * 100)
    (tmp_path / "2-text.txt").write_bytes(b"c" * 300)
    # runs of 100 bytes: positions 3-4 are bytes 200-399: 0-text 200-249, 1-junk all, 2-text 0-49
    assert example.skipped_bytes(tmp_path, [(3, 4)], 100) == [
        {"file": "0-text.txt", "bytes": "200-249"}, {"file": "1-junk.txt", "bytes": "0-99"},
        {"file": "2-text.txt", "bytes": "0-49"}]
    assert example.skipped_bytes(tmp_path, [(9, 9)], 100) == []   # past the data's end: not told


def test_the_run_log_and_the_ledger_say_the_window_and_what_the_trainer_left_out():
    from engine.records.failure_ledger import LedgerEntry, build_ledger, to_markdown
    from engine.records.run_log import render_entry
    from engine.records.run_log_entry import skipped_words

    record = {"id": "incident-2", "playbook": "loss-spike", "outcome": "recovered",
              "data_skipped": {"steps": [5, 40], "positions": [21, 56], "batches": 36, "tokens": 36864,
                               "trainer_reports": [{"files": [{"file": "1-junk.txt", "bytes": "0-12287"}]}]}}
    words = skipped_words(record)
    assert words == ("steps 5-40 (data positions 21-56: 36 batches, 36,864 tokens); the trainer left out: "
                     "files [{'file': '1-junk.txt', 'bytes': '0-12287'}]"), words
    assert f"- **Data skipped:** {words}" in render_entry(record)
    assert f"- **Data skipped:** {words}" in render_entry({**record, "same_as": "incident-1"})   # the shorter repeat entry
    assert skipped_words({"data_skipped": {"steps": "5-40"}}) is None and skipped_words({}) is None   # a bad record
    entries = [LedgerEntry("run", "incident-2", "loss-spike", "recovered", "sig", "text", data_skipped=words),
               LedgerEntry("run", "incident-1", "loss-spike", "recovered", "sig", "text")]
    markdown = to_markdown(build_ledger(entries), ["run"])
    assert f"## Data skipped\n\n- run:incident-2: {words}" in markdown, markdown
