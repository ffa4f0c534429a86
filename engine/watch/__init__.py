"""The watch loop on top: the supervisor, start-up, the incident runner, the runtime effects, upkeep, metrics, dry-run, drills."""
