"""PURE. Progress and loss lines of stacks other than runbook's own, read as the same Progress events.

A run whose trainer prints none of the lines its adapter reads (an HF Trainer script without
runbook's callback, DeepSpeed/Megatron, Keras, mlx, nanoGPT) still prints its step and loss. Unread,
such a run shows no progress at all, and a healthy run is judged a hang; its NaN is text only. The
observer asks this module only when the trainer adapter's own parser recognised nothing in a line.

Bounded whatever the line: at most MAX_LINE characters are looked at, and the patterns are RE2's
(google-re2, linear time: the playbooks' own matcher, engine/expr/patterns.py, which this floor may not
import). Formats, as the stacks print them:

  HF Trainer's logged dict:  {'loss': 2.31, 'grad_norm': 0.9, 'learning_rate': 5e-05, 'epoch': 0.5}
  DeepSpeed/Megatron:        iteration      100/  500000 | ... elapsed time per iteration (ms): 4247.9 | ... | lm loss: 2.1E+00 | ... | grad norm: 0.3 |
  Keras:                     100/100 [==============================] - 328s 3s/step - loss: 0.2445
                             (Keras 3: 100/100 ━━━━━━━━━━━━━━━━━━━━ 3s 30ms/step - loss: 0.2445)
  mlx (mlx_lm):              Iter 10: Train loss 2.345, Learning Rate 1.000e-05, ...
  nanoGPT:                   iter 100: loss 2.3456, time 123.45ms, mfu 12.34%   (a timestamp before it, as some forks print)

Megatron leaves a NaN loss out of its line (`_megatron` says how that is read).

A step's gradient norm that is non-finite (HF's 'grad_norm': nan, Megatron's grad norm: nan) makes the
step's loss non-finite here: the update that step applied poisoned the weights, whatever loss it
printed before (HF logs 'loss': 0.0 beside it), and the loss is what the nan playbook reads.
"""

from __future__ import annotations

import math
from typing import Protocol

import re2

from engine.observe.events import Progress

MAX_LINE = 4096   # a progress line is far shorter; a longer one is looked at up to here

_NUM = r"[-+]?(?:\d{1,20}(?:\.\d{0,20})?|\.\d{1,20})(?:[eE][-+]?\d{1,4})?|[-+]?(?:nan|NaN|inf|Inf|Infinity)"
_HF_DICT = re2.compile(r"^\s{0,40}\{'loss': '?(" + _NUM + r")'?,.*'epoch': ")
_HF_GRAD = re2.compile(r"'grad_norm': '?(" + _NUM + r")'?[,}]")
_HF_LR = re2.compile(r"'learning_rate': '?(" + _NUM + r")'?[,}]")
_MEGATRON = re2.compile(r"^.{0,80}?\biteration\s{1,20}(\d{1,12})/\s{0,20}\d{1,12} \|")
_MEGATRON_LOSS = re2.compile(r"\| lm loss: (" + _NUM + r") \|")
_MEGATRON_GRAD = re2.compile(r"\| grad norm: (" + _NUM + r") \|")
_MEGATRON_TIME = re2.compile(r"\| elapsed time per iteration \(ms\): (" + _NUM + r") \|")
_MEGATRON_ANY_LOSS = re2.compile(r"\| (?:[\w-]{1,40} )?loss: ")            # "lm loss:", "sop loss:", "loss:"; not "loss scale:"
_MEGATRON_SKIPPED = re2.compile(r"\| number of skipped iterations: {0,20}(\d{1,12}) \|")
_MEGATRON_NAN_ITERS = re2.compile(r"\| number of nan iterations: {0,20}(\d{1,12}) \|")
_KERAS = re2.compile(r"^\s{0,20}\d{1,12}/\d{1,12} (?:\[[=>.]{1,200}\]|[━─]{1,200}) .{0,200}?\bloss: (" + _NUM + r")")
_MLX = re2.compile(r"^Iter (\d{1,12}): Train loss (" + _NUM + r")(?:,|$)")
_NANOGPT = re2.compile(r"^.{0,40}?\biter (\d{1,12}): loss (" + _NUM + r"), time (" + _NUM + r") ?ms\b")

UNKNOWN_MS = math.nan   # the line gives no time per step: the tracker takes no throughput from it


def _number(text: str) -> float:
    return float(text)   # the patterns admit only what float() reads ("nan", "inf", "1.4E+01")


def _poisoned(loss: float, grad_norm: str | None) -> float:
    return math.nan if grad_norm is not None and not math.isfinite(_number(grad_norm)) else loss


def other_stack_progress(line: str, previous_step: int | None) -> Progress | None:
    """The Progress one line of another stack's output reports, or None. A format that prints no step
    (HF's logged dict, Keras's bar) counts one after `previous_step`, marked step_known=False: a count of
    lines is no optimizer step, and no checkpoint step may be derived from it."""
    text = line[:MAX_LINE]
    next_step = 1 if previous_step is None else previous_step + 1
    if (m := _HF_DICT.search(text)) is not None:
        grad, lr = _HF_GRAD.search(text), _HF_LR.search(text)
        loss = _poisoned(_number(m.group(1)), grad.group(1) if grad else None)
        return _progress(next_step, loss, UNKNOWN_MS, step_known=False, grad_norm=_optional(grad), lr=_optional(lr))
    if (m := _MEGATRON.search(text)) is not None:
        return _megatron(int(m.group(1)), text)
    if (m := _MLX.search(text)) is not None:
        return _progress(int(m.group(1)), _number(m.group(2)), UNKNOWN_MS)
    if (m := _NANOGPT.search(text)) is not None:
        return _progress(int(m.group(1)), _number(m.group(2)), _number(m.group(3)))
    if (m := _KERAS.search(text)) is not None:
        return _progress(next_step, _number(m.group(1)), UNKNOWN_MS, step_known=False)
    return None


def _megatron(step: int, text: str) -> Progress | None:
    """Megatron's (and Megatron-DeepSpeed's) iteration line. Its training_log prints each loss only `if avg >
    0.0`, which a NaN fails: a NaN loss is left out of the line, not printed as nan (deepspeedai/Megatron-DeepSpeed
    #434). So a line with no loss at all while no iteration of the interval was skipped (a skipped one adds
    nothing, and a loss-scale warm-up that skips them all prints no loss either) reports a NaN loss, as does a
    non-zero "number of nan iterations"."""
    grad = _MEGATRON_GRAD.search(text)
    took = _MEGATRON_TIME.search(text)
    nan_iters = _MEGATRON_NAN_ITERS.search(text)
    loss_m = _MEGATRON_LOSS.search(text)
    if nan_iters is not None and int(nan_iters.group(1)) > 0:
        loss = math.nan
    elif loss_m is not None:
        loss = _poisoned(_number(loss_m.group(1)), grad.group(1) if grad else None)
    elif _MEGATRON_ANY_LOSS.search(text) is None and (skipped := _MEGATRON_SKIPPED.search(text)) is not None \
            and int(skipped.group(1)) == 0:
        loss = math.nan
    else:
        return None   # another loss's name, or every iteration skipped: no loss this module can read
    return _progress(step, loss, _number(took.group(1)) if took else UNKNOWN_MS, grad_norm=_optional(grad))


class _Match(Protocol):   # re2's match object (google-re2 ships no types)
    def group(self, index: int, /) -> str: ...


def _optional(match: _Match | None) -> float | None:
    return _number(match.group(1)) if match is not None else None


def _progress(step: int, loss: float, took_ms: float, step_known: bool = True, grad_norm: float | None = None,
              lr: float | None = None) -> Progress:
    return Progress(iter_num=step, step=step, loss=loss, iter_time_ms=took_ms, is_step=True, step_known=step_known,
                    grad_norm=grad_norm, lr=lr)
