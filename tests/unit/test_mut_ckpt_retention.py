"""engine/checkpoints/retention.py on a real catalog over real script checkpoints: keep_last_k + best, applied
as soon as a new save is sealed, never while nothing new was verified, and a refusal said, not forced."""

from __future__ import annotations

from engine.checkpoints.retention import Retention, retain
from tests.unit.ckpt_files import announce, save, saved


def test_retain_keeps_the_newest_k_and_the_best_and_leaves_partial_saves(tmp_path):
    catalog = saved(tmp_path, 10, 20, 30, 40)
    partial = catalog.out_dir / "step-000050"
    partial.mkdir()
    (partial / "state.pt").write_bytes(b"PK\x03\x04 half a zip")
    announce(tmp_path / "run", partial)
    result = retain(catalog, keep_last_k=1, best_step=10, trainer_alive=False)
    assert result.deleted == ["step-000020", "step-000030"]
    assert partial.is_dir() and result.moved == []   # remove_partial=False: a partial save is never moved here


def _retention(catalog, keep: int, best=None):
    warned: list[str] = []
    return Retention(catalog, lambda: keep, lambda: best, warned.append), warned


def test_after_new_saves_prunes_once_more_than_k_plus_one_are_verified(tmp_path):
    catalog = saved(tmp_path, 10, 20)
    retention, warned = _retention(catalog, keep=1)
    assert retention.after_new_saves(trainer_alive=True) is None       # 2 verified: k + 1, nothing to do yet
    assert sorted(p.name for p in catalog.out_dir.iterdir()) == ["last", "step-000010", "step-000020"]
    announce(tmp_path / "run", save(catalog.out_dir, 30))
    catalog.refresh()
    result = retention.after_new_saves(trainer_alive=True)
    assert result is not None and result.deleted == ["step-000010", "step-000020"] and result.kept_steps == [30]
    assert warned == []
    assert retention.after_new_saves(trainer_alive=True) is None       # nothing new sealed since


def test_after_new_saves_does_nothing_until_a_new_save_is_verified(tmp_path):
    catalog = saved(tmp_path, 10, 20, 30, 40)
    retention, _ = _retention(catalog, keep=10)
    assert retention.after_new_saves(trainer_alive=True) is None        # 4 verified, keep 10
    retention.keep_last_k = lambda: 1
    assert retention.after_new_saves(trainer_alive=True) is None        # none new since it last looked
    assert len(list(catalog.out_dir.glob("step-*"))) == 4
    announce(tmp_path / "run", save(catalog.out_dir, 50))
    catalog.refresh()
    assert retention.after_new_saves(trainer_alive=True).deleted == ["step-000010", "step-000020", "step-000030", "step-000040"]


def test_now_returns_the_prune_and_says_a_refusal_through_warn(tmp_path):
    catalog = saved(tmp_path, 10, 20, 30)
    retention, warned = _retention(catalog, keep=1, best=20)
    result = retention.now(trainer_alive=False)
    assert result.deleted == ["step-000010"] and result.kept_steps == [20, 30] and warned == []
    retention, warned = _retention(catalog, keep=-1)
    assert retention.now(trainer_alive=False) is None
    assert warned == ["retention skipped: keep_last_k must be >= 0"]
