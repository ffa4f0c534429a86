"""Everything runbook knows about litgpt `pretrain`: adapter.py (the seam), launch.py (config, env,
argv), log_lines.py (its output), layout.py (its checkpoint folders), pth_scan.py (zip CRCs of a
torch.save file), resume.py (torch state: rescale, relocate, inspect). Nothing is imported here, so
that importing one part never drags in the rest (or torch)."""
