"""The data windows a run skips (engine/core/data_windows.py, issue 48 item 1), the trainer side's mapping
(runbook.sdk.data_position) and the divergences a restarted watcher knows; the real run is
tests/runs/test_skip_data.py."""

from __future__ import annotations

import pytest

from engine.core.data_windows import format_windows, parse, position, skip_steps


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

