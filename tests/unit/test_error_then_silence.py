"""A live trainer that printed an error of a known class and then went silent is judged by that class, not as a
bare hang: through the watcher's own path for a running trainer (a followed log, the Observer, its snapshot's
`lines_since_progress`, the shipped playbooks' decide).

Lines (tests/field/corpus): the ENOSPC is bghira/SimpleTuner#2353's (accelerate-simpletuner-2353), the OOM
megatron.yaml's torch.cuda.OutOfMemoryError, the /dev/shm failure NVIDIA/nccl#342's (bluefog-nccl-342); the
progress lines are litgpt's own format (the default trainer's adapter reads them).
"""

from __future__ import annotations

from engine.trainers.litgpt.adapter import LitGPTAdapter
from tests.unit.test_other_stacks import watch_live

ENOSPC = "Error while serializing: I/O error: No space left on device (os error 28)"
OOM = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB (GPU 0; 31.74 GiB total capacity; "
       "28.82 GiB already allocated; 577.12 MiB free; 29.97 GiB reserved in total by PyTorch)")
NCCL_SHM = ["include/shm.h:28 NCCL WARN Call to posix_fallocate failed: No space left on device",
            "include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-250a7cc850ba9298-0-1-3 (size 9637888)"]


def progress(step: int) -> str:
    return (f"Epoch 1 | iter {4 * step} step {step} | loss train: {6.0 - 0.01 * step:.3f}, val: n/a | "
            f"iter time: 11.00 ms (step) remaining time: 0:00:05")


STEPS = [progress(s) for s in range(1, 13)]


def test_silence_after_a_disk_full_line_is_disk_full(tmp_path):
    snapshot, fired = watch_live(tmp_path, LitGPTAdapter(), STEPS + [ENOSPC], silent_for=120)
    assert fired == "disk-full" and snapshot.lines_since_progress == 1


def test_silence_after_an_out_of_memory_line_is_oom(tmp_path):
    _, fired = watch_live(tmp_path, LitGPTAdapter(), STEPS + [OOM], silent_for=120)
    assert fired == "oom"


def test_silence_after_nccls_dev_shm_failure_is_the_environments(tmp_path):
    _, fired = watch_live(tmp_path, LitGPTAdapter(), STEPS + NCCL_SHM, silent_for=120)
    assert fired == "environment-fault"


def test_an_error_the_trainer_trained_on_past_leaves_a_later_silence_a_hang(tmp_path):
    snapshot, fired = watch_live(tmp_path, LitGPTAdapter(), STEPS + [ENOSPC, progress(13), progress(14)], silent_for=120)
    assert fired == "hang" and snapshot.lines_since_progress == 0


def test_a_disk_full_line_while_the_trainer_keeps_training_is_nothing_yet(tmp_path):
    _, fired = watch_live(tmp_path, LitGPTAdapter(), STEPS + [ENOSPC], silent_for=1)
    assert fired is None
