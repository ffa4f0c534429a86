"""The Hugging Face Trainer's checkpoints: `<output_dir>/checkpoint-<global_step>/` (no zero padding),
resumed from the folder, judged by its weights; trainer_state.json is written last of a save.

A save holds more than the model and the optimizer: the tokenizer or processor when the script passes
`processing_class=` (run_clm does), one RNG state per rank, a large model's shards and their index. A name
missing here makes the folder hold "a file runbook did not write", and such a folder is never pruned."""

from __future__ import annotations

import re
from pathlib import Path

from engine.trainers.script import formats
from engine.trainers.script.layout import FolderLayout

MODEL = "model.safetensors"
FILES = frozenset({
    MODEL, "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json", "config.json",
    "generation_config.json", "optimizer.pt", "optimizer.bin", "scheduler.pt", "scaler.pt", "rng_state.pth",
    "trainer_state.json", "training_args.bin",
    # processing_class.save_pretrained: a tokenizer (fast or slow, BPE or sentencepiece) or a processor.
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "chat_template.jinja",
    "chat_template.json", "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json"})
# Names with a number: a sharded model's pieces (save_pretrained's max_shard_size), each rank's RNG state.
SHARD = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")
PATTERNS = (SHARD, re.compile(r"pytorch_model-\d{5}-of-\d{5}\.bin"), re.compile(r"rng_state_\d{1,6}\.pth"))


class HFLayout(FolderLayout):
    def __init__(self) -> None:
        super().__init__("checkpoint-", MODEL, 0, FILES, required_files=("trainer_state.json",), patterns=PATTERNS)

    def resume_file(self, folder: Path) -> Path:
        """model.safetensors; for a sharded save its first shard (HF resumes from the folder either way)."""
        whole = Path(folder) / MODEL
        if whole.exists():
            return whole
        first = min((p for p in _children(folder) if (m := SHARD.fullmatch(p.name)) and int(m.group(1)) == 1),
                    default=None)
        return first or whole

    def weight_files(self, folder: Path) -> list[Path]:
        """The files holding the model's tensors: model.safetensors, or every shard of a sharded save."""
        resume = self.resume_file(folder)
        if not SHARD.fullmatch(resume.name):
            return [resume] if resume.is_file() else []
        return sorted(p for p in _children(folder) if SHARD.fullmatch(p.name) and p.is_file())

    def looks_whole(self, folder: Path) -> bool:
        """Every shard a sharded save names in its own file names is there and whole."""
        resume = self.resume_file(folder)
        if not (m := SHARD.fullmatch(resume.name)):
            return formats.whole(resume)
        return all(formats.whole(Path(folder) / f"model-{n:05d}-of-{m.group(2)}.safetensors")
                   for n in range(1, int(m.group(2)) + 1))


def _children(folder: Path) -> list[Path]:
    try:
        return list(Path(folder).iterdir())
    except OSError:
        return []


def hf_layout() -> HFLayout:
    return HFLayout()
