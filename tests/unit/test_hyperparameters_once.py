"""engine/trainers/litgpt/hyperparameters.py: litgpt's save_hyperparameters runs once per process; later saves
write the same files with the same bytes. Here with a stand-in for litgpt's function (what litgpt's real one
writes is checked against the real run in tests/litgpt/test_hyperparameters.py)."""

from __future__ import annotations

import types

import pytest

from engine.trainers.litgpt.hyperparameters import OncePerProcess, parse_once


def writer(calls: list, files: dict[str, str], fail_first: int = 0):
    def save_hyperparameters(function, checkpoint_dir, known_commands=None):
        calls.append(checkpoint_dir)
        if len(calls) <= fail_first:
            raise RuntimeError("parse failed")
        for name, text in files.items():
            (checkpoint_dir / name).write_text(text + f" {len(calls)}")
    return save_hyperparameters


def step_folder(tmp_path, step: int):
    folder = tmp_path / f"step-{step:08d}"
    folder.mkdir()
    (folder / "lit_model.pth").write_bytes(b"weights")   # saved before the hyperparameters, as litgpt does
    return folder


def test_the_first_save_parses_and_every_later_save_writes_the_same_files_and_nothing_else(tmp_path):
    calls = []
    once = OncePerProcess(writer(calls, {"hyperparameters.yaml": "lr: 0.003", "data.yaml": "seed: 1"}))
    folders = [step_folder(tmp_path, step) for step in (10, 20, 30)]
    for folder in folders:
        once(print, folder)
    assert calls == [folders[0]] and once.parses == 1
    for folder in folders:
        assert sorted(p.name for p in folder.iterdir()) == ["data.yaml", "hyperparameters.yaml", "lit_model.pth"]
        assert (folder / "hyperparameters.yaml").read_text() == "lr: 0.003 1"
        assert (folder / "data.yaml").read_text() == "seed: 1 1"
        assert (folder / "lit_model.pth").read_bytes() == b"weights"


def test_a_failed_first_parse_is_not_remembered(tmp_path):
    calls = []
    once = OncePerProcess(writer(calls, {"hyperparameters.yaml": "lr"}, fail_first=1))
    first, second, third = (step_folder(tmp_path, step) for step in (10, 20, 30))
    with pytest.raises(RuntimeError):
        once(print, first)
    once(print, second)
    once(print, third)
    assert calls == [first, second]
    assert (third / "hyperparameters.yaml").read_text() == "lr 2"


def test_a_function_that_writes_no_hyperparameters_file_is_called_every_time(tmp_path):
    calls = []
    once = OncePerProcess(writer(calls, {"other.yaml": "x"}))
    folders = [step_folder(tmp_path, step) for step in (10, 20)]
    for folder in folders:
        once(print, folder)
    assert calls == folders


def test_a_call_with_other_arguments_goes_to_litgpt(tmp_path):
    calls = []
    once = OncePerProcess(writer(calls, {"hyperparameters.yaml": "lr"}))
    first, second = step_folder(tmp_path, 10), step_folder(tmp_path, 20)
    once(print, first)
    once(print, second, ["pretrain"])
    assert calls == [first, second]


def test_parse_once_replaces_the_name_litgpt_s_save_checkpoint_calls():
    calls = []
    module = types.SimpleNamespace(save_hyperparameters=writer(calls, {}))
    original = module.save_hyperparameters
    once = parse_once(module)
    assert module.save_hyperparameters is once and once.save is original
