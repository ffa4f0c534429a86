"""A launcher in torchrun's manner around the toy trainer (tests/toy_trainer) whose worker dies of a real SIGBUS
at step AT, as every rank does inside a container whose /dev/shm is too small: the worker is killed with
SIGBUS (its exit is Popen's -7), and the launcher prints torchrun's report of it and exits 1, as torchrun does.

`trainer.kind: python:tests.unit.sigbus_launcher:SigbusLauncherToyAdapter`; as a script:
`python sigbus_launcher.py TOY COMMAND...` (the adapter puts it in front of the toy's command).
"""

from __future__ import annotations

import dataclasses
import re
import signal
import subprocess
import sys

AT = 6
TOY_STEP = re.compile(r"^toy step (\d+)/")


def main(command: list[str]) -> int:
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for raw in child.stdout:
        line = raw.decode("utf-8", "replace")
        sys.stdout.write(line)
        sys.stdout.flush()
        step = TOY_STEP.match(line)
        if step and int(step.group(1)) >= AT:
            child.send_signal(signal.SIGBUS)
            break
    code = child.wait()
    # torchrun's summary of the failed worker, with its real pid and exit code.
    print(f"ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: {code}) local_rank: 0 "
          f"(pid: {child.pid}) of binary: {sys.executable}")
    print("Root Cause (first observed failure):")
    print(f"  exitcode  : {code} (pid: {child.pid})")
    print(f"  traceback : Signal {-code} ({signal.Signals(-code).name}) received by PID {child.pid}", flush=True)
    return 1


try:   # the adapter side; the script side needs none of it
    from tests.toy_trainer.adapter import ToyAdapter
except ImportError:
    ToyAdapter = object


class SigbusLauncherToyAdapter(ToyAdapter):
    def prepare_launch(self, loaded, launch_dir, resume_from, data_hash):
        spec = super().prepare_launch(loaded, launch_dir, resume_from, data_hash)
        return dataclasses.replace(spec, argv=[sys.executable, __file__, *spec.argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
