"""The checkpoints of an out_dir: find, verify, seal, link, quarantine, prune; which saves this run wrote."""
