"""Turning what can be seen from outside into snapshots: the observer, trainer output events, slowness sampling and diagnosis, advice."""
