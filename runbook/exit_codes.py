"""Exit codes of every runbook command, in one place (documented in README.md)."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    NO_MATCH = 1            # `playbooks explain`: the playbook does not match; `replay`: decision changed
    USAGE = 2               # typer's own code for a bad command line
    BAD_CONFIG = 3          # run config, playbook or data problem found before anything ran
    ESCALATED = 4           # runbook stopped acting and handed the run to a human
    LOCKED = 5              # another watcher holds this run folder; `slurm submit`: a job of the run is pending/running
    TRAINER_MISSING = 6     # litgpt (or the configured trainer) is not installed
    INTERRUPTED = 7         # the watcher was stopped by SIGTERM/SIGINT; the run can be resumed
    INVALID = 8             # lint/test found invalid playbooks or failing playbook tests
    NOT_FOUND = 9           # an incident id or record that does not exist / cannot be read
    DATA_ISSUES = 10        # `scan-data` found bad lines
    UNDELIVERED = 11        # `notify --flush`: notices still pending (Slack did not accept them in time)
    WATCHER_FAILED = 12     # the watcher itself crashed (a bug, not the run): the trainer keeps running unsupervised;
                            # `status`: the run is unfinished and no watcher holds it. `runbook watch` re-attaches
    RUNNING = 13            # `status`: a watcher is supervising the run right now
    SECOND_TRAINER = 15     # `watch`: a trainer of this run folder is alive and cannot be re-attached; no second one is started
    DRAFT_REFUSED = 14      # `playbooks draft`: the incident needs no new playbook (recovered, still open) or the draft exists
    TRIAGE_ESCALATE = 16    # `triage`: runbook would escalate this log (nothing claims it, unknown-crash, or the plan escalates)
    OUT_DIR_TAKEN = 17      # `watch`: out_dir belongs to another run (its runbook-owner.json), live or not; nothing touched
    OUT_DIR_BLOCKED = 18    # `watch`: out_dir holds a folder or file named `last` that is not runbook's link; left as it is
    RUN_DIR_TAKEN = 19      # `watch`: run_dir belongs to another project (its owner.json names another config); nothing touched


# `runbook status` exits with the run's phase, as `runbook watch` would have exited had it ended now.
STATUS_CODES = {"completed": ExitCode.OK, "escalated": ExitCode.ESCALATED, "stopped": ExitCode.INTERRUPTED}
