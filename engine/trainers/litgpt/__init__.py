"""Everything runbook knows about litgpt `pretrain`: launch.py (config, env, argv), log_lines.py (its
output), layout.py (its checkpoint folders), pth_scan.py (zip CRCs of a torch.save file), resume.py (torch
state: rescale, relocate, inspect)."""

from engine.trainers.litgpt.adapter import LitGPTAdapter
from engine.trainers.litgpt.launch import cuda_available

__all__ = ["LitGPTAdapter", "cuda_available"]
