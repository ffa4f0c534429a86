"""A block of junk in the data, reached at a known step (issue 48 item 6), on the `script` and `hf-trainer` kinds: a
real nanoGPT-style run (examples/script/train.py --sequential) and a real Hugging Face Trainer
(examples/hf_trainer/train.py --train_sampling_strategy sequential), each reading its data in order (data position p
trains on the p-th run of batch x block bytes of the files) whose train folder holds 12 positions' worth of random bytes at positions 21-32. The junk's loss stays
over 2x the text's while it lasts (measured at lr 0.01: 9.3 falling towards ln 256 = 5.5, against ~2.5): loss-spike. Rung 1 (today's playbook) rolls back and halves the lr, and the
same data spikes it again at the same first bad step; rung 2 rolls back, skips the data window and puts the lr
back; the run completes. Checked: the rungs, the window covering the junk, the skipped tokens being the window's,
the scan naming the junk's file, and the final model's loss on the validation text within 15% of an undisturbed
run's on the clean corpus."""

from __future__ import annotations

import json
import random

import pytest

from engine.trainers.run_config import load_config
from tests.conftest import REPO
from tests.trainers.projects import BATCH, BLOCK, TRAINERS, corpus, make_project
from tests.trainers.test_scenarios import run

pytestmark = [pytest.mark.slow, pytest.mark.waits]   # mostly 0.2 s sleeps a step: runs on the waiting worker (tests/waiting_worker.py)
RUN = BATCH * BLOCK          # bytes per data position
JUNK = (21, 32)              # data positions of random bytes
STEPS, SAVE_INTERVAL, LR = 48, 16, 0.01


SEQUENTIAL = {   # each kind reading its data in order: data position p is the p-th run of batch x block bytes
    "script": ("command", ["--sequential"]),
    "hf-trainer": ("args", ["--train_sampling_strategy", "sequential"]),   # HF's own SequentialSampler
}


def sequential_project(root, name: str, junk: bool):
    trainer = TRAINERS[name]
    project = make_project(root, trainer, lr=LR, save_interval=SAVE_INTERVAL, max_tokens=STEPS * RUN)
    key, extra = SEQUENTIAL[name]
    # 0.2 s a step: the junk's 12 steps outlast the watcher's polls and its closing of the first incident
    project.set(trainer={key: [*trainer.trainer[key], *extra],
                         "env": {"OMP_NUM_THREADS": "1", "RUNBOOK_EXAMPLE_STEP_SECONDS": "0.2"}})
    text = corpus()
    folder = root / "data" / "train"
    (folder / "corpus.txt").unlink()
    (folder / "0-text.txt").write_text(text[: (JUNK[0] - 1) * RUN])
    (folder / "2-text.txt").write_text(text[(JUNK[0] - 1) * RUN: len(text) * 9 // 10])
    if junk:
        noise = random.Random(48).randbytes((JUNK[1] - JUNK[0] + 1) * RUN)
        (folder / "1-junk.txt").write_bytes(noise)
    return project


def validation_loss(project, name: str) -> float:
    """The final model's mean loss over the validation text, in order (the same batches for every model)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("example_script", REPO / "examples" / "script" / "train.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    data = example.corpus(project.root / "data" / "val")
    batches = [example.step_batch(data, 0, p, BATCH, BLOCK, sequential=True) for p in range(1, 21)]
    if name == "script":
        model = example.GPT(BLOCK)
        model.load_state_dict(torch.load(project.out_dir / "final" / "state.pt", weights_only=True)["model"])
        predict = model
    else:
        from transformers import GPT2LMHeadModel

        hf_model = GPT2LMHeadModel.from_pretrained(project.out_dir / "final")
        predict = lambda x: hf_model(input_ids=x).logits   # noqa: E731
    with torch.no_grad():
        losses = [torch.nn.functional.cross_entropy(predict(x).flatten(0, 1), y.flatten()).item() for x, y in batches]
    return sum(losses) / len(losses)


@pytest.mark.parametrize("name", list(SEQUENTIAL))
def test_junk_data_that_spikes_again_after_the_lr_cut_is_skipped_and_the_run_completes(tmp_path, name):
    reference = sequential_project(tmp_path / "reference", name, junk=False)
    code, _ = run(reference, TRAINERS[name])
    assert code == 0, reference.watch_output()[-3000:]
    project = sequential_project(tmp_path / "project", name, junk=True)
    lr = load_config(project.config).config.lr
    code, _ = run(project, TRAINERS[name])
    assert code == 0, project.watch_output()[-4000:]

    incidents = project.incidents()
    assert [(i["playbook"], i["outcome"]) for i in incidents] == [("loss-spike", "recovered")] * 2, incidents
    first, second = incidents
    assert "skipping the data" not in json.dumps(first) and "skipping the data" in json.dumps(second)
    journal = [json.loads(line) for line in (project.run_dir / "journal.jsonl").read_text().splitlines()]
    [skipped] = [e for e in journal if e["kind"] == "data_skipped"]
    first_pos, last_pos = skipped["positions"]
    assert first_pos <= JUNK[0] and last_pos >= JUNK[1], skipped                     # the window covers the junk
    assert skipped["tokens"] == (last_pos - first_pos + 1) * BATCH * BLOCK, skipped   # the window's tokens
    assert "1-junk.txt" in json.dumps(second.get("data_scan") or {}), second.get("data_scan")
    # what the relaunched trainer says it left out, in its data's terms, kept in the record and the run log
    [told] = second["data_skipped"]["trainer_reports"]
    if name == "script":   # files and byte offsets: the whole junk file among them
        assert {"file": "1-junk.txt", "bytes": f"0-{(JUNK[1] - JUNK[0] + 1) * RUN - 1}"} in told["files"], told
    else:                  # the dataset's rows, one block each, in order
        assert told["dataset_rows"] == f"{(first_pos - 1) * BATCH}-{last_pos * BATCH - 1}", told
    assert "**Data skipped:** steps" in project.run_log.read_text() and "the trainer left out" in project.run_log.read_text()
    assert load_config(project.config).config.lr == lr                              # the lr put back
    assert (project.out_dir / "final" / TRAINERS[name].final_file).is_file()
    losses = validation_loss(project, name), validation_loss(reference, name)
    print(f"{name}: final validation loss {losses[0]:.3f} against the undisturbed run's {losses[1]:.3f}; skipped {skipped}")
    assert 0.85 < losses[0] / losses[1] < 1.15, losses
