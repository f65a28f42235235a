"""Time and length that fit a judge server: each request's deadline and `max_tokens`, from what the
server's replies showed (kept in its Habits, per model, across processes: veralith.llm.notes).

* Speed. Each reply (the probes' included: veralith.llm.probe) adds (prompt tokens, output tokens,
  seconds) to the last SPEED_KEPT; seconds ≈ a × prompt tokens + b × output tokens is fitted to them
  (least squares, neither rate below zero). A local server's request gets the deadline
  `SLACK × (a × its prompt + b × its max_tokens) + MARGIN_S` when that is longer than the configured
  timeout (VERALITH_TIMEOUT_S's default, 60 s): a reply as long as its cap is given the time the
  server needs for it, twice over. Until a reply has been timed, UNMEASURED_S: a CPU server's first
  long call takes minutes, and a timed-out request is not sent again. A request that timed out
  counts as a reply of its max_tokens that took its whole deadline, so the next deadline is longer.
  A timeout set explicitly is kept as it is, and so is any timeout for a server elsewhere (its speed
  is not this machine's to measure).
* Length. Each reply of a task adds its output tokens / the task's output allowance for the call
  (veralith.llm.estimate.output_allowance) to the last OUTPUTS_KEPT of that task. Once there are
  OUTPUTS_NEEDED, `max_tokens` is the allowance times the largest of them, times CAP_SLACK, plus
  CAP_MARGIN tokens, never above the fixed cap (veralith.llm.estimate.max_output_tokens) nor below
  CAP_FLOOR: a model that writes short replies is stopped sooner when it does run away, which on a
  CPU is the difference between seconds and minutes. A reply cut off at the cap counts as twice its
  length, so a cap that was too small grows back.
"""

from __future__ import annotations

import math
from typing import Any

from veralith.llm.server import Habits

__all__ = ["deadline", "fit", "max_tokens", "note_output", "note_speed"]

SPEED_KEPT = 16
UNMEASURED_S = 300.0
SLACK = 2.0
MARGIN_S = 10.0
OUTPUTS_KEPT = 24
OUTPUTS_NEEDED = 3
CAP_SLACK = 1.5
CAP_MARGIN = 64
CAP_FLOOR = 128


def note_speed(habits: Habits, prompt_tokens: int, output_tokens: int, seconds: float) -> None:
    if output_tokens <= 0 or seconds <= 0:
        return
    habits.speed = [*habits.speed, [float(prompt_tokens), float(output_tokens), round(seconds, 3)]][-SPEED_KEPT:]


def fit(speed: list[list[float]]) -> tuple[float, float] | None:
    """(seconds per prompt token, seconds per output token), or None without enough replies."""
    if len(speed) < 2:
        return None
    spp = sum(p * p for p, _, _ in speed)
    soo = sum(o * o for _, o, _ in speed)
    spo = sum(p * o for p, o, _ in speed)
    sps = sum(p * s for p, _, s in speed)
    sos = sum(o * s for _, o, s in speed)
    det = spp * soo - spo * spo
    if det > 1e-9 * spp * soo:
        a, b = (sps * soo - sos * spo) / det, (sos * spp - sps * spo) / det
        if a >= 0 and b >= 0:
            return a, b
    # One rate alone (the replies do not tell the two apart, or one came out below zero): output tokens
    # carry it all, which overstates a long prompt's cost less than the opposite would understate it.
    return 0.0, (sos / soo if soo else 0.0)


def deadline(habits: Habits, configured: float, *, adaptive: bool, prompt_tokens: int,
             max_tokens: int | None) -> float:
    """The seconds one request may take (see the module doc)."""
    if not adaptive or not max_tokens:
        return configured
    rates = fit(habits.speed)
    if rates is None:
        return max(configured, UNMEASURED_S)
    need = rates[0] * prompt_tokens + rates[1] * (max_tokens or 0)
    return max(configured, min(3600.0, SLACK * need + MARGIN_S))


def note_output(habits: Habits, task: str, output_tokens: int, allowance: int, *, cut_off: bool) -> None:
    if allowance <= 0:
        return
    ratio = output_tokens * (2 if cut_off else 1) / allowance
    habits.outputs = {**habits.outputs, task: [*habits.outputs.get(task, []), round(ratio, 3)][-OUTPUTS_KEPT:]}


def max_tokens(habits: Habits, task: str, allowance: int, fixed_cap: int) -> int:
    """The cap for a call of `task` whose output allowance is `allowance` (see the module doc)."""
    seen: list[Any] = habits.outputs.get(task, [])
    if len(seen) < OUTPUTS_NEEDED:
        return fixed_cap
    learnt = math.ceil(allowance * max(seen) * CAP_SLACK) + CAP_MARGIN
    return max(CAP_FLOOR, min(fixed_cap, learnt))
