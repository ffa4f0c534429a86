"""A worker of its own for the tests that mostly wait (a pytest-xdist scheduler, loaded by tests/conftest.py).

Some tests spend most of their wall time waiting on real timeouts with a core nearly idle: a hang timeout to
expire, a throttled trainer's slow steps, a notice save that stops, pacing of a benchmark smoke (bench_suite_cpu
reads each test's CPU beside its wall time: docs/benchmarks.md, "Where the test suite's time goes"). On two
workers a worker sits in each such wait, so the suite's wall time is its CPU plus those waits, over two.

README's test command runs three workers on the 2 cores (`-n 3 --dist loadgroup`). With this scheduler the last
worker runs only the xdist group WAITS_GROUP (the tests marked `waits`: tests/conftest.py puts them there), one
test after another, and the others every other unit of work, exactly as loadgroup hands them out. So the two
cores still run two CPU-bound tests at a time, as on two workers, and the waits add little load beside them (the
marked tests use a fraction of a core). What plain `-n 3` does instead, three CPU-bound tests on two cores,
failed timing-sensitive cluster tests (README.md).

With fewer than three workers, or no WAITS_GROUP test selected, it is loadgroup unchanged (the group is one unit
of work like any group; the last worker, given nothing, stops). If the waiting worker is lost, its unit goes back
to the queue and any worker takes it; a worker that dies fails the test it was running (once: `remove_node`)
and the session goes on with a replacement.
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling

WAITS_GROUP = "waits"
MIN_WORKERS = 3   # two for the CPU, one for the waits


def worker_number(node) -> int:
    return int(str(node.workerinput["workerid"]).removeprefix("gw"))


class WaitingWorkerScheduling(LoadGroupScheduling):
    """loadgroup, with the last worker kept for WAITS_GROUP alone (decided once, at the first assignment)."""

    _waiter_id: str | None = None
    _decided = False

    def _waiter(self):
        if not self._decided:
            self._decided = True
            if len(self.nodes) >= MIN_WORKERS:
                self._waiter_id = max(self.nodes, key=worker_number).workerinput["workerid"]
        return next((n for n in self.nodes if n.workerinput["workerid"] == self._waiter_id), None)

    def _assign_work_unit(self, node) -> None:
        waiter = self._waiter()
        if waiter is None:
            return super()._assign_work_unit(node)
        if node is waiter:
            scope = WAITS_GROUP if WAITS_GROUP in self.workqueue else None
        else:
            scope = next((s for s in self.workqueue if s != WAITS_GROUP), None)
        if scope is None:
            node.shutdown()   # finishes what it was sent, then stops: nothing left that it may take
            return None
        self.workqueue.move_to_end(scope, last=False)   # loadgroup assigns the queue's first unit
        return super()._assign_work_unit(node)


    def remove_node(self, node) -> str | None:
        """loadscope's remove_node, except that the test a crashed worker was running is not queued again.

        xdist puts the crashed worker's whole unit back in the queue with the crashed test still pending, so a
        replacement worker runs it again, crashes again, and so on until the restarts run out; meanwhile the
        replacements stall (measured: a test that SIGKILLs its worker hung `-n 3 --dist loadgroup` until the
        CI timeout). Here the crashed test is reported failed once (xdist's handle_crashitem, from the returned
        id) and the rest of its unit runs on another worker."""
        workload = self.assigned_work.pop(node)
        crashitem = next((nodeid for unit in workload.values() for nodeid, done in unit.items() if not done), None)
        if crashitem is None:
            return None
        workload[self._split_scope(crashitem)][crashitem] = True
        self.workqueue.update({scope: unit for scope, unit in workload.items() if not all(unit.values())})
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem


def make_scheduler(config, log):
    """The scheduler for `--dist loadgroup`; None (xdist's own choice) for any other mode."""
    if config.getvalue("dist") == "loadgroup":
        return WaitingWorkerScheduling(config, log)
    return None
