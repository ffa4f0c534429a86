"""Failure signatures (engine/records/signature.py): what differs between two occurrences of one failure is
masked, what tells two failures apart is kept. Pure functions: no run needed."""

from __future__ import annotations

import json

from hypothesis import given, strategies as st

from engine.records.incident import SCHEMA_VERSION, Incident
from engine.records.signature import find_exception, first_with, mask, signature_of, signature_of_record, similarity


def crash(tail: list[str], code: int = 1, step: int | None = 12) -> dict:
    return {"trainer": {"alive": False, "exit_code": code}, "metrics": {"step": step}, "tail": tail}


def traceback(last: str, noise: str = "Epoch 1 | iter 24 step 12 | loss train: 5.812") -> list[str]:
    return [noise, "Traceback (most recent call last):", '  File "/opt/x/train.py", line 88, in fit',
            "    raise Failure(...)", last]


SHARD = "ShardIndexCorrupted: shard 0x7f3a2c index {n} in {path} has a bad header after step {step}"
TOKENIZER = "TokenizerDrift: vocabulary hash {n} changed under {path} after step {step}"


def test_the_same_failure_twice_gives_one_signature_and_two_failures_two():
    first = signature_of(crash(traceback(SHARD.format(n=1234, path="/tmp/run-a/data/train-00017.bin", step=12))))
    again = signature_of(crash(traceback(SHARD.format(n=99, path="/scratch/b/train-00003.bin", step=31),
                                         noise="Epoch 2 | iter 70 step 35 | loss train: 4.1"), step=31))
    other = signature_of(crash(traceback(TOKENIZER.format(n=77, path="/tmp/run-a/tok", step=12))))
    assert first.id == again.id
    assert first.id != other.id
    assert first.text == "exit 1, ShardIndexCorrupted: shard <hex> index <n> in <path> has a bad header after step <n>, while training"
    assert first.log_line == SHARD.format(n=1234, path="/tmp/run-a/data/train-00017.bin", step=12)   # raw, for people


def test_what_tells_failures_apart_is_kept():
    base = crash(traceback("OSError: [Errno 28] No space left on device: '/a/b'"))
    assert signature_of(base).message == "[Errno 28] No space left on device: '<path>'"
    enoent = crash(traceback("OSError: [Errno 2] No such file or directory: '/a/b'"))
    assert signature_of(base).id != signature_of(enoent).id
    assert signature_of(crash(base["tail"], code=2)).id != signature_of(base).id           # another exit code
    assert signature_of(crash(base["tail"], step=None)).phase == "before the first step"
    assert signature_of(crash(base["tail"], step=None)).id != signature_of(base).id
    killed = {"trainer": {"alive": False, "exit_code": -9, "signal": "SIGKILL"}, "metrics": {"step": 3}, "tail": ["x"]}
    assert signature_of(killed).ending == "signal SIGKILL" and signature_of(killed).exception is None
    hang = {"trainer": {"alive": True, "stopped": True}, "tail": []}
    assert signature_of(hang).text == "alive, stopped, while alive"


def test_mask_keeps_identifiers_and_masks_values():
    assert mask("alloc_cpu.cpp:127 float16 cuda:0 at 12/40 lr 1e-05 x=-8") == \
        "alloc_cpu.cpp:<n> float16 cuda:<n> at <n>/<n> lr <n> x=<n>"
    assert mask("id 123e4567-e89b-12d3-a456-426614174000 sha deadbeef1234 ptr 0xFFee00") == "id <id> sha <id> ptr <hex>"
    assert mask("I/O error reading data/part-7.bin") == "I/O error reading <path>"


def test_the_exception_after_the_traceback_wins_over_later_lines():
    tail = traceback("ValueError: bad shape (3, 4)") + ["wandb: Waiting for W&B process to finish... (success)"]
    assert find_exception(tail)[:2] == ("ValueError", "bad shape (3, 4)")
    assert find_exception(["Seed set to 42", "Epoch 1 | iter 3 step 1 | loss train: 6.2"]) is None
    assert find_exception(["torch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB"])[0] == "torch.OutOfMemoryError"
    ranked = ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "x.py", line 2', "[rank1]: KeyError: 'w'"]
    assert find_exception(ranked)[:2] == ("KeyError", "'w'")


@given(st.integers(0, 10**12), st.integers(0, 10**6), st.text("abcdefghij0123456789_-", min_size=1, max_size=20),
       st.integers(0, 2**48))
def test_masking_is_stable_under_what_changes_between_runs(number, step, folder, address):
    line = f"ShardIndexCorrupted: shard {hex(address)} index {number} in /tmp/{folder}/train.bin has a bad header after step {step}"
    reference = signature_of(crash(traceback(SHARD.format(n=1, path="/x/y/train.bin", step=1))))
    assert signature_of(crash(traceback(line), step=step)).id == reference.id


@given(st.text(max_size=300))
def test_any_log_text_gives_a_signature(text):
    sig = signature_of(crash(text.split("\n")))
    assert sig.id.startswith("sig-") and len(sig.id) == 14
    assert sig.log_line is None or len(sig.log_line) <= 300


def test_similarity_reasons_and_order():
    shard = signature_of(crash(traceback(SHARD.format(n=1, path="/a/b.bin", step=2))))
    shard2 = signature_of(crash(traceback("ShardIndexCorrupted: shard 0x1 has no header"), code=1))
    oom = signature_of(crash(traceback("torch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB")))
    close, reasons = similarity(shard, shard2)
    far, _ = similarity(shard, oom)
    assert close > far and "same exception type (ShardIndexCorrupted)" in reasons
    assert similarity(shard, shard)[0] == 1.0


def test_records_old_and_new_have_signatures(tmp_path):
    """Schema 3 stores it; a schema-2 record (no field) still yields one from its snapshot, the same."""
    snapshot = crash(traceback(SHARD.format(n=5, path="/a/b.bin", step=3)), step=3)
    stored = signature_of(snapshot)
    new = {"id": "incident-4", "schema_version": SCHEMA_VERSION, "snapshot": snapshot, "signature": stored.model_dump()}
    old = {"id": "incident-2", "schema_version": 2, "snapshot": snapshot}
    assert signature_of_record(new) == stored == signature_of_record(old)
    assert Incident.model_validate(json.loads(json.dumps(new))).signature == stored
    assert Incident.model_validate(old).signature is None and Incident.model_validate(old).same_as is None
    assert first_with(stored.id, [{"id": "incident-1", "snapshot": crash(["x"])}, old, new]) == "incident-2"
