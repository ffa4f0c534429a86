"""The trainer as OS processes: launch through the launcher, prove identity, signal, stop, warm spares, ranks and nodes."""
