"""The adapter protocol (engine/trainers/base.py): every adapter offers all of it, and what a trainer
needs before it starts (its install hint, a device, a tokenizer) is the adapter's to say, not runbook's."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest

from engine.trainers.run_config import load_config
from engine.trainers.base import CheckpointLayout, TrainerAdapter
from engine.trainers.litgpt.adapter import LitGPTAdapter
from engine.trainers.litgpt.launch import cuda_available
from runbook.exit_codes import ExitCode
from runbook.watch_command import Refusal, check_trainer, prepare_data
from tests.conftest import REPO
from tests.toy_trainer.adapter import ToyAdapter

TOY_KIND = "python:tests.toy_trainer.adapter:ToyAdapter"


def protocol_members(protocol) -> set[str]:
    own = {name for name, _ in inspect.getmembers(protocol) if not name.startswith("_")}
    return own | set(getattr(protocol, "__annotations__", {}))


@pytest.mark.parametrize("adapter", [LitGPTAdapter(), ToyAdapter()], ids=["litgpt", "toy"])
def test_every_adapter_offers_the_whole_protocol(adapter):
    assert not {m for m in protocol_members(TrainerAdapter) if not hasattr(adapter, m)}
    assert not {m for m in protocol_members(CheckpointLayout) if not hasattr(adapter.layout, m)}
    assert isinstance(adapter.install_hint, str) and adapter.install_hint


def project_without_tokenizer(root: Path, **trainer) -> Path:
    (root / "configs").mkdir(parents=True)
    shutil.copy(REPO / "configs" / "run_config.yaml", root / "configs" / "run_config.yaml")
    for name in ("train", "val"):
        (root / "data" / name).mkdir(parents=True)
        (root / "data" / name / "a.txt").write_text("some text\n")
    loaded = load_config(root / "configs" / "run_config.yaml")
    loaded.write_back({"data": {"train_dir": "data/train", "val_dir": "data/val", "tokenizer_dir": "data/tokenizer",
                                "make_default": False}, "trainer": trainer})
    return root / "configs" / "run_config.yaml"


@pytest.mark.slow
def test_litgpt_asks_for_a_tokenizer_and_the_toy_does_not(tmp_path):
    litgpt = load_config(project_without_tokenizer(tmp_path / "litgpt"))
    with pytest.raises(Refusal, match="data.tokenizer_dir: no tokenizer.json in") as refused:
        prepare_data(litgpt, accept_data_change=False, record_hash=False)
    assert refused.value.code == ExitCode.BAD_CONFIG
    toy = load_config(project_without_tokenizer(tmp_path / "toy", kind=TOY_KIND))
    assert prepare_data(toy, accept_data_change=False, record_hash=False).startswith("sha256:")


@pytest.mark.slow
def test_a_cuda_device_the_trainer_cannot_use_is_refused_in_the_adapters_words(tmp_path):
    toy = load_config(project_without_tokenizer(tmp_path / "toy", kind=TOY_KIND, device="cuda"))
    with pytest.raises(Refusal, match="the toy trainer runs on the CPU only"):
        prepare_data(toy, accept_data_change=False, record_hash=False)
    if cuda_available():
        pytest.skip("this machine has a CUDA GPU, so a cuda config is valid for litgpt here")
    litgpt = load_config(project_without_tokenizer(tmp_path / "litgpt", device="cuda"))
    assert [p for p in LitGPTAdapter().check_environment(litgpt) if "trainer.device is 'cuda'" in p]


class MissingToy(ToyAdapter):
    name = "missing-toy"

    def is_installed(self) -> bool:
        return False


def test_a_missing_trainer_is_refused_with_its_adapters_install_hint(tmp_path):
    from engine.trainers import register_trainer

    register_trainer("missing-toy", MissingToy)
    loaded = load_config(project_without_tokenizer(tmp_path / "p", kind="missing-toy"))
    with pytest.raises(Refusal) as refused:
        check_trainer(loaded)
    assert refused.value.code == ExitCode.TRAINER_MISSING
    assert str(refused.value) == f"missing-toy is not installed in this Python environment; {MissingToy.install_hint}"
