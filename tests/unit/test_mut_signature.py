"""A failure signature's parts at their edges, written against the mutants benchmarks/bench_mutation.py found
alive (engine/records/signature.py): each test says which part of the signature it pins."""

from __future__ import annotations

from engine.records.signature import (MAX_LOG_LINE, MAX_LINE_SCANNED, MAX_MESSAGE, Signature, find_exception, first_with,
                                      mask, repeat_phrase, signature_of, signature_of_record, similarity)

TB = "Traceback (most recent call last):"


def crash(tail, trainer=None, step=12, ranks=None):
    trainer = {"alive": False, "exit_code": 1, **(trainer or {})}
    if ranks is not None:
        trainer["ranks"] = ranks
    return {"trainer": trainer, "metrics": {"step": step}, "tail": tail}


def test_the_id_is_the_same_in_every_version_that_masks_the_same_way():
    # The ledger, the run log and drafts group by this id across runs and versions: a change to how it is
    # computed (the key's parts, their order, the hash's length) must be deliberate.
    sig = signature_of(crash([TB, "  File x", "ValueError: bad value 3 at 0x7f"]))
    assert (sig.ending, sig.exception, sig.message, sig.phase) == ("exit 1", "ValueError", "bad value <n> at <hex>", "while training")
    assert sig.id == "sig-" + __import__("hashlib").sha256(
        "exit 1\nValueError\nbad value <n> at <hex>\nwhile training".encode()).hexdigest()[:10]
    assert len(sig.id) == 14


def test_the_exception_type_and_the_message_each_tell_failures_apart():
    a = signature_of(crash(["ValueError: same words"]))
    b = signature_of(crash(["KeyError: same words"]))
    c = signature_of(crash(["ValueError: other words"]))
    assert len({a.id, b.id, c.id}) == 3


def test_the_text_line_with_and_without_a_message():
    assert signature_of(crash([TB, "ValueError: boom"])).text == "exit 1, ValueError: boom, while training"
    assert signature_of(crash([TB, "StopIteration"])).text == "exit 1, StopIteration, while training"
    assert signature_of(crash(["all fine"], step=None)).text == "exit 1, before the first step"


def test_message_evidence_and_scanned_lines_are_clipped_at_their_limits():
    long = signature_of(crash(["ValueError: " + "word " * 100]))
    assert len(long.message) == MAX_MESSAGE
    line = "ValueError: " + "y" * 400
    assert signature_of(crash([line])).log_line == line[:MAX_LOG_LINE]
    assert mask("x" * (MAX_LINE_SCANNED - 2) + " yz") == "x" * (MAX_LINE_SCANNED - 2) + " y"


def test_errno_is_kept_up_to_26_times_and_everything_else_masked():
    assert mask("[Errno 28] No space at 0x7f3a in /tmp/x.bin after 42 [Errno 2]") == \
        "[Errno 28] No space at <hex> in <path> after <n> [Errno 2]"
    many = " ".join(f"[Errno {n}]" for n in range(1, 28))
    assert mask(many) == " ".join(f"[Errno {n}]" for n in range(1, 27)) + " [Errno <n>]"


def test_after_a_traceback_the_first_unindented_exception_line_even_without_an_error_word():
    assert find_exception([TB, "StopIteration: done"]) == ("StopIteration", "done", "StopIteration: done")
    assert find_exception([TB, '  File "x", line 1', "", "StopIteration", "Epoch 1 | iter 2"]) == ("StopIteration", "", "StopIteration")


def test_without_a_traceback_only_a_type_that_reads_like_an_exception():
    assert find_exception(["ValueError: bad value"]) == ("ValueError", "bad value", "ValueError: bad value")
    assert find_exception(["torch.OutOfMemoryError: CUDA out of memory"])[0] == "torch.OutOfMemoryError"
    assert find_exception(["Validating: 100%"]) is None            # Type: message, but no exception word
    assert find_exception(["just text here", "Seed set to 3"]) is None


def test_only_the_last_400_lines_are_read():
    assert find_exception(["ValueError: early"] + ["noise"] * 400) is None
    assert find_exception(["ValueError: early"] + ["noise"] * 399) == ("ValueError", "early", "ValueError: early")


def test_evidence_is_the_exception_line_else_the_last_line():
    assert signature_of(crash(["ValueError: x", "more noise"])).log_line == "ValueError: x"
    assert signature_of(crash(["first", "last one", "  "])).log_line == "last one"


def test_how_the_trainer_ended():
    def ending(**trainer):
        return signature_of({"trainer": trainer, "tail": []}).ending
    assert ending(alive=True) == "alive" and ending(alive=True, stopped=True) == "alive, stopped"
    assert ending(signal="SIGKILL") == "signal SIGKILL" and ending(exit_code=1) == "exit 1"
    assert ending(exit_code=True) == "exit unknown" and ending(exit_code=None) == "exit unknown"


def test_which_rank_or_node_failed_first_is_part_of_the_ending():
    died = {"first_failed": 1, "ranks": [{"rank": 0, "exit_code": 1}, {"rank": 1, "exit_code": 1}]}
    assert signature_of(crash([], ranks=died)).ending == "exit 1, a rank died first"
    saved = {"first_failed": 1, "ranks": [{"rank": 0, "exit_code": 1}, {"rank": 1, "exit_code": 75}]}
    assert signature_of(crash([], ranks=saved)).ending == "exit 1"          # a notice's save is no rank's death
    stopped = {"first_failed": 1, "first_failed_signal": "SIGTERM", "ranks": [{"rank": 1, "exit_code": 1}]}
    killed = {"first_failed": 1, "first_failed_signal": "SIGKILL", "ranks": [{"rank": 1, "exit_code": 1}]}
    assert signature_of(crash([], ranks=stopped)).ending == "exit 1"
    assert signature_of(crash([], ranks=killed)).ending == "exit 1, a rank died first"
    assert signature_of(crash([], ranks={"first_failed": 0})).ending == "exit 1"
    assert signature_of(crash([], ranks={"dead_nodes": ["n2"], "first_failed": 1})).ending == "exit 1, a node lost"
    assert signature_of(crash([], ranks=["not", "a", "dict"])).ending == "exit 1"


def test_the_phase_and_a_snapshot_with_parts_missing():
    assert signature_of({"trainer": {"alive": True}}).phase == "while alive"
    assert signature_of(crash([], step=None)).phase == "before the first step"
    assert signature_of(crash([], step=0)).phase == "while training"
    bare = signature_of(None)
    assert (bare.ending, bare.phase, bare.exception, bare.log_line) == ("exit unknown", "before the first step", None, None)
    assert signature_of({"trainer": None, "metrics": None, "tail": None}).ending == "exit unknown"


def test_a_record_s_signature_stored_or_from_its_snapshot():
    sig = signature_of(crash(["ValueError: x"]))
    assert signature_of_record({"signature": sig.model_dump()}) == sig
    assert signature_of_record({"signature": {"id": 3}, "snapshot": crash(["ValueError: x"])}) == sig
    assert signature_of_record({"signature": "junk"}) is None
    assert signature_of_record({}) is None


def test_first_with_finds_the_oldest_record_with_the_signature():
    sig = signature_of(crash(["ValueError: x"]))
    records = [{"id": "incident-1"}, {"id": "incident-2", "snapshot": crash(["KeyError: y"])},
               {"id": "incident-3", "signature": sig.model_dump()}, {"id": "incident-4", "signature": sig.model_dump()}]
    assert first_with(sig.id, records) == "incident-3"
    assert first_with("sig-0000000000", records) is None


def test_repeat_phrase_names_unknown_failures():
    assert repeat_phrase("unknown-crash", "incident-1") == "the same unknown failure as incident-1"
    assert repeat_phrase("oom", "incident-2") == "the same failure as incident-2"


def sig(ending="exit 1", exception=None, message=None, phase="while training") -> Signature:
    return Signature(id="sig-x", ending=ending, exception=exception, message=message, phase=phase)


def test_similarity_weighs_each_part():
    same = sig(exception="ValueError", message="bad value here")
    assert similarity(same, same) == (1.0, ["same ending (exit 1)", "same exception type (ValueError)",
                                            "100% of the message words shared"])
    # one shared word of seven: 0.2 + 0.3 / 7, rounded to 3 places
    a, b = sig(message="alpha beta gamma delta"), sig(ending="signal SIGKILL", message="alpha eps zeta eta", phase="while alive")
    assert similarity(a, b) == (round(0.3 / 7, 3), ["different ending (exit 1 vs signal SIGKILL)", "14% of the message words shared"])
    c, d = sig(exception="ValueError"), sig(exception="KeyError", message="words here")
    assert similarity(c, d) == (0.3, ["same ending (exit 1)", "different exception type (ValueError vs KeyError)",
                                      "0% of the message words shared"])
    assert similarity(sig(exception="ValueError"), sig())[1][1] == "different exception type (ValueError vs none)"
    assert similarity(sig(), sig(exception="KeyError"))[1][1] == "different exception type (none vs KeyError)"
    assert similarity(sig(), sig()) == (0.3, ["same ending (exit 1)"])
    assert similarity(sig(phase="while alive"), sig()) == (0.2, ["same ending (exit 1)"])


def test_a_record_written_before_log_line_still_reads_its_raw_line():
    # Records before issue 46 named the raw line `evidence`; a new one writes `log_line`.
    old = Signature.model_validate({"id": "sig-1", "ending": "exit 1", "evidence": "ValueError: x"})
    assert old.log_line == "ValueError: x" and "log_line" in old.model_dump() and "evidence" not in old.model_dump()
