"""An HF save holds more than the model and optimizer: the tokenizer (`processing_class=`, as run_clm passes),
one RNG state per rank, a large model's shards and their index. Each checkpoint here is written by
transformers' own save_pretrained and torch.save, as Trainer._save_checkpoint writes it; keep_last_k must
prune such folders, and a file a user put in one must still keep it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, Trainer, TrainingArguments

from engine.checkpoints.catalog import CheckpointCatalog
from engine.core.run_folder import RunFolder
from engine.trainers.hf.adapter import HFTrainerAdapter


def tokenizer() -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel()
    bpe.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 10,
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<eos>"]))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>", unk_token="<unk>")


def hf_save(out_dir: Path, step: int, processing_class, ranks: int = 1, max_shard_size: str | None = None,
            nan: bool = False) -> Path:
    """One checkpoint-<step>/ with the names Trainer._save_checkpoint gives its files, announced as the callback does."""
    folder = out_dir / f"checkpoint-{step}"
    torch.manual_seed(step)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    if nan:
        with torch.no_grad():
            model.transformer.wte.weight[0, 0] = float("nan")   # in the first shard
            model.transformer.ln_f.bias[0] = float("nan")   # in the last
    model.save_pretrained(folder, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    processing_class.save_pretrained(folder)
    torch.save({"state": {}, "param_groups": [{"lr": 1e-3}]}, folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    for rank in range(ranks):   # Trainer._save_rng_state: rng_state.pth alone, rng_state_<rank>.pth on several
        torch.save({"cpu": torch.random.get_rng_state()}, folder / (f"rng_state_{rank}.pth" if ranks > 1 else "rng_state.pth"))
    torch.save({"output_dir": str(out_dir)}, folder / "training_args.bin")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def announce(run_dir: Path, *folders: Path) -> None:
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    with open(run_dir / "logs" / "trainer-001.log", "a") as log:
        log.writelines(f"runbook: saving {os.path.abspath(f)}\n" for f in folders)


def test_keep_last_k_prunes_hf_checkpoints_holding_a_tokenizer_and_each_ranks_rng_state(tmp_path):
    """QA: every checkpoint-N of run_clm held tokenizer.json + tokenizer_config.json (and rng_state_<rank>.pth on
    several ranks): all counted as files runbook did not write, so keep_last_k: 3 deleted nothing, ever."""
    out_dir, run_dir = tmp_path / "out", tmp_path / "run"
    processing_class = tokenizer()
    folders = [hf_save(out_dir, step, processing_class, ranks=2) for step in (4, 8, 12, 16, 20)]
    assert {"tokenizer.json", "tokenizer_config.json", "rng_state_1.pth"} <= set(os.listdir(folders[0]))
    (folders[1] / "notes.txt").write_text("a user's note: this folder is not runbook's alone\n")
    announce(run_dir, *folders)
    catalog = CheckpointCatalog(out_dir, RunFolder(run_dir), run_dir / "quarantine", HFTrainerAdapter())
    assert catalog.refresh() == [] and catalog.verified == {4, 8, 12, 16, 20}

    pruned = catalog.prune(keep_last_k=3, best_step=None, remove_partial=True, trainer_alive=False)

    assert pruned.deleted == ["checkpoint-4"], pruned.summary()
    assert pruned.foreign == ["checkpoint-8/notes.txt"]   # the user's file: its folder stays, said
    assert [c.step for c in catalog.checkpoints()] == [8, 12, 16, 20]


class Ids(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        ids = (torch.arange(16) + i) % 64
        return {"input_ids": ids, "labels": ids}


def test_keep_last_k_prunes_the_checkpoints_a_real_trainer_saved_with_its_tokenizer(tmp_path):
    """transformers' own Trainer._save_checkpoint with processing_class= (run_clm's), 4 saves of a tiny model."""
    out_dir, run_dir = tmp_path / "out", tmp_path / "run"
    processing_class = tokenizer()
    processing_class.pad_token = processing_class.eos_token
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16))
    args = TrainingArguments(str(out_dir), max_steps=4, save_steps=1, per_device_train_batch_size=2, use_cpu=True,
                             report_to="none", disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=Ids(), processing_class=processing_class).train()
    folders = [out_dir / f"checkpoint-{step}" for step in (1, 2, 3, 4)]
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(folders[0]))
    announce(run_dir, *folders)
    catalog = CheckpointCatalog(out_dir, RunFolder(run_dir), run_dir / "quarantine", HFTrainerAdapter())
    assert catalog.refresh() == [] and catalog.verified == {1, 2, 3, 4}

    pruned = catalog.prune(keep_last_k=2, best_step=None, remove_partial=True, trainer_alive=False)

    assert pruned.deleted == ["checkpoint-1", "checkpoint-2"] and pruned.foreign == [], pruned.summary()


def test_a_sharded_hf_save_is_verified_pruned_and_scanned_shard_by_shard(tmp_path):
    """A large model's save has model-0000x-of-0000y.safetensors + model.safetensors.index.json, no
    model.safetensors: it must verify (else it is never pruned nor resumed from), and the NaN scan reads every shard."""
    out_dir, run_dir = tmp_path / "out", tmp_path / "run"
    processing_class = tokenizer()
    folders = [hf_save(out_dir, step, processing_class, max_shard_size="40KB", nan=step == 12) for step in (4, 8, 12)]
    shards = sorted(n for n in os.listdir(folders[0]) if n.startswith("model-"))
    assert len(shards) > 2 and "model.safetensors" not in os.listdir(folders[0])
    announce(run_dir, *folders)
    adapter = HFTrainerAdapter()
    catalog = CheckpointCatalog(out_dir, RunFolder(run_dir), run_dir / "quarantine", adapter)
    assert catalog.refresh() == [] and catalog.verified == {4, 8, 12}
    assert adapter.layout.looks_whole(folders[0])
    newest = catalog.checkpoints()[-1]
    assert adapter.find_nonfinite(newest, limit=10) == ["transformer.wte.weight", "transformer.ln_f.bias"]

    pruned = catalog.prune(keep_last_k=1, best_step=None, remove_partial=True, trainer_alive=False)
    assert pruned.deleted == ["checkpoint-4", "checkpoint-8"], pruned.summary()

    last = out_dir / "checkpoint-12" / shards[-1]
    last.write_bytes(last.read_bytes()[:-10])   # a cut shard, not the first: the folder is not whole
    assert not adapter.layout.looks_whole(out_dir / "checkpoint-12")
