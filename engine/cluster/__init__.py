"""Schedulers and clouds: SLURM (pure parts, its commands, its records, the watcher inside a job) and cloud interruption notices."""
