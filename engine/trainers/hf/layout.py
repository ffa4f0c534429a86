"""The Hugging Face Trainer's checkpoints: `<output_dir>/checkpoint-<global_step>/` (no zero padding),
resumed from the folder, judged by model.safetensors; trainer_state.json is written last of a save."""

from __future__ import annotations

from engine.trainers.script.layout import FolderLayout

FILES = frozenset({"model.safetensors", "pytorch_model.bin", "config.json", "generation_config.json", "optimizer.pt",
                   "scheduler.pt", "scaler.pt", "rng_state.pth", "trainer_state.json", "training_args.bin"})


def hf_layout() -> FolderLayout:
    return FolderLayout("checkpoint-", "model.safetensors", 0, FILES, required_files=("trainer_state.json",))
