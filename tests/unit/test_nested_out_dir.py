"""Another run's out_dir nested inside this one's (issue 45, item 3): `A_out/step-00000999` claimed as run B's
out_dir looks like A's corrupt checkpoint by its name. It must never be verified, quarantined or pruned by A,
its owner marker stays where it is, and A says so once."""

from __future__ import annotations

import json

from engine.checkpoints.catalog import CheckpointCatalog
from engine.checkpoints.out_dir_claim import OutDirClaim
from engine.checkpoints.partial_saves import find_partial_saves, read_announced
from engine.checkpoints.store import OWNER_MARKER_NAME, list_checkpoints
from engine.core.run_folder import RunFolder
from engine.trainers.litgpt.adapter import LitGPTAdapter
from tests.unit.test_checkpoints import LAYOUT, announce, make_ckpt


def listing(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_another_runs_out_dir_inside_this_ones_is_never_a_checkpoint_quarantined_or_pruned(tmp_path):
    a_out, a_run, b_run = tmp_path / "a-out", RunFolder(tmp_path / "run-a"), RunFolder(tmp_path / "run-b")
    b_out = a_out / "step-00000999"   # B's out_dir, named like one of A's checkpoints
    with OutDirClaim(a_out, a_run, tmp_path / "a.yaml"), OutDirClaim(b_out, b_run, tmp_path / "b.yaml"):
        ckpts = [make_ckpt(a_out, 10), make_ckpt(a_out, 20), make_ckpt(a_out, 30)]
        (b_out / "train.log").write_text("B trains here\n")
        # Even if A's trainer had announced a save of that name, it is B's: never a partial save of A's.
        announce(a_run.logs, *ckpts)
        with open(a_run.logs / "trainer-000.log", "a") as log:
            log.write(f"Saving checkpoint to {str(b_out / 'lit_model.pth')!r}\n")
        before = listing(b_out)
        warnings: list[str] = []
        catalog = CheckpointCatalog(a_out, a_run, a_run.root / "quarantine", LitGPTAdapter())
        catalog.warn = warnings.append

        assert [c.step for c in list_checkpoints(a_out, LAYOUT)] == [10, 20, 30]
        assert catalog.refresh(quarantine_corrupt=True) == [] and catalog.refresh(quarantine_corrupt=True) == []
        announced = read_announced(a_run.logs, a_out, LAYOUT)
        assert "step-00000999" in find_partial_saves(a_out, announced, LAYOUT).foreign
        pruned = catalog.prune(keep_last_k=1, best_step=None, remove_partial=True, trainer_alive=False)

        assert pruned.moved == [] and pruned.deleted == ["step-00000010", "step-00000020"], pruned.summary()
        assert listing(b_out) == before and json.loads((b_out / OWNER_MARKER_NAME).read_text())["run_id"] == \
            b_run.run_id.read_text().strip()
        assert not (a_run.root / "quarantine").exists() or not any((a_run.root / "quarantine").iterdir())
        assert len(warnings) == 1 and str(b_out) in warnings[0] and "another run's out_dir" in warnings[0]
