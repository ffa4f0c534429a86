"""Every process failing with one error before the first step (engine/observe/same_start_error.py), pure.

Real lines: deepspeed.yaml's deepspeed-1846-cpu-adam-undefined-symbol-curand (deepspeedai/DeepSpeed#1846, two
ranks' interleaved tracebacks, one undefined symbol) and deepspeed-autopoison-6-cpu-adam-so-missing-every-rank
(azshue/AutoPoison#6, a destructor's 'Exception ignored in' after the failure); the lost peer is pytorch.yaml's
'[rank3]: torch.distributed.DistBackendError: ... remote process exited or there was a network error'.
"""

from __future__ import annotations

from engine.observe.throughput import ProgressMeaning
from engine.core.state import RankStatus, RanksStatus
from engine.observe.same_start_error import same_error_everywhere, tail_errors

CURAND = ("ImportError: /media/max/Volume/GPT/finetune/DeepSpeed/deepspeed/ops/adam/cpu_adam_op.cpython-38-x86_64-linux-gnu.so: "
          "undefined symbol: curandCreateGenerator")
FRAME = '  File "<frozen importlib._bootstrap>", line 657, in _load_unlocked'
CPU_ADAM = ("ImportError: /home/wangyidan/.cache/torch_extensions/py39_cu118/cpu_adam/cpu_adam.so: cannot open shared "
            "object file: No such file or directory")
AUTOPOISON = [CPU_ADAM, "    module = importlib.util.module_from_spec(spec)", CPU_ADAM,
              "Exception ignored in: <function DeepSpeedCPUAdam.__del__ at 0x7fd4e5fd7a60>",
              "Traceback (most recent call last):", "    self.ds_opt_adam.destroy_adam(self.opt_id)",
              "AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'"]
LOST_PEER = ("torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/"
             "ProcessGroupNCCL.cpp:3763, remote process exited or there was a network error, NCCL version 2.28.8")


def ranks(*entries: RankStatus) -> RanksStatus:
    return RanksStatus(world_size=len(entries), ranks=list(entries), under_launcher=True)


def test_each_processs_traceback_in_the_log_ending_the_same_way():
    assert same_error_everywhere(RanksStatus(), [FRAME, CURAND, FRAME, CURAND]) == CURAND
    assert same_error_everywhere(RanksStatus(), AUTOPOISON) == CPU_ADAM   # the destructor's complaint is no failure
    assert tail_errors(AUTOPOISON) == [CPU_ADAM, CPU_ADAM]


def test_the_ranks_own_errors_masked_of_their_numbers():
    a = RankStatus(rank=0, exit_code=1, error="[rank0]: RuntimeError: device 0 has compute capability 3.5, unsupported")
    b = RankStatus(rank=1, exit_code=1, error="[rank1]: RuntimeError: device 1 has compute capability 3.5, unsupported")
    assert same_error_everywhere(ranks(a, b), []) == "RuntimeError: device 1 has compute capability 3.5, unsupported"


def test_not_every_rank_one_error_by_exit_code_is_no_evidence():
    one = RankStatus(rank=0, exit_code=1, error=CURAND)
    assert same_error_everywhere(RanksStatus(), [FRAME, CURAND]) is None                      # one process
    assert same_error_everywhere(RanksStatus(), [CURAND, CPU_ADAM]) is None                   # two errors
    assert same_error_everywhere(ranks(one, RankStatus(rank=1, alive=True)), [CURAND, CURAND]) is None   # one still runs
    assert same_error_everywhere(ranks(one, RankStatus(rank=1, exit_code=-11, signal="SIGSEGV")), [CURAND, CURAND]) is None
    lost = RankStatus(rank=1, exit_code=1, error=LOST_PEER, peer_loss=True)
    assert same_error_everywhere(ranks(RankStatus(rank=0, exit_code=1, error=LOST_PEER, peer_loss=True), lost), []) is None
    # Three ranks the launcher reports failed, two tracebacks in the log: not every rank's error is known.
    reported = ranks(RankStatus(rank=0, exit_code=1), RankStatus(rank=1, exit_code=1), RankStatus(rank=2, exit_code=1))
    assert same_error_everywhere(reported, [CURAND, CURAND]) is None                          # fewer tracebacks than ranks


def test_a_hostile_tail_is_bounded():
    huge = "RuntimeError: " + "x" * 5_000_000
    assert same_error_everywhere(RanksStatus(), [huge] * 3 + ["A" * 10_000_000]) is not None


def test_launches_failing_alike_before_progress_are_counted_in_a_row():
    from engine.observe.same_start_error import alike_in_a_row

    assert alike_in_a_row([], "E") == 1 and alike_in_a_row(["E", "E"], "E") == 3
    assert alike_in_a_row(["E", None, "E"], "E") == 2     # a launch that progressed between breaks the row
    assert alike_in_a_row(["F"], "E") == 1 and alike_in_a_row(["E"], None) == 0


def test_a_second_launch_dying_of_the_same_error_before_its_first_step_is_escalated_not_restarted(tmp_path):
    """The watcher's own path: the Observer follows launch 1's log, then launch 2's (as the supervisor does on a
    relaunch); each ends before its first progress line with espnet/espnet#4461's ENOSPC (tests/field/corpus
    espnet-4461). Launch 1 is disk-full's (prune, resume); launch 2 the same again: a human's."""
    from engine.core.config import WatchSettings
    from engine.core.state import CheckpointStatus, TrainerStatus
    from engine.language.matcher import AttemptHistory, MatchMemory, decide
    from engine.language.playbook_set import load_set
    from engine.language.playbook_testing import build_config
    from engine.observe.observer import Observer
    from engine.trainers.litgpt.adapter import LitGPTAdapter
    from engine.watch.triage import _NoEvidence

    observer = Observer(LitGPTAdapter(), tmp_path, ProgressMeaning(256))
    observer.evidence = _NoEvidence()
    playbooks, config = load_set([], True)[0], build_config({})
    decided = []
    for launch in (1, 2):
        log = tmp_path / f"trainer-{launch:03d}.log"
        log.write_text("Process SpawnProcess-1:\nOSError: [Errno 28] No space left on device\n")
        observer.follow(log, ProgressMeaning(256))
        now = observer.launched_at + 5
        dead = TrainerStatus(alive=False, exit_code=1, launches=launch)
        snapshot = observer.snapshot(now, "running", dead, CheckpointStatus(), observer.read_lines(now), WatchSettings())
        decision = decide(snapshot, config, playbooks, MatchMemory(), AttemptHistory()).decision
        decided.append((snapshot.trainer.failed_alike_before_progress, decision.playbook.name))
    assert decided == [(1, "disk-full"), (2, "same-failure-again")]
