"""The claim-and-evaluate runner: the one path by which a stored trace is judged and its outcome written.

`log()`'s background evaluator, `veralith worker`, `eval`, `resume` and `batch collect` all judge a
stored trace with `Runner.run` (or its awaited twin `Runner.arun`):

1. claim it (atomic, leased to this process; veralith.work.claims) — or the caller holds the claim,
   or takes it once the judgment is complete (`take`, a batch job's reservation);
2. judge it with the `Judge` the caller passed in (the pipeline, with the caller's judge client);
3. write the result and mark the trace done, in one transaction, only while the claim is ours.

Whatever goes wrong is decided once, by veralith.work.policy, and the runner acts on it before it
returns an `Outcome` naming the action: a result written (SAVED), a trace that was not ours
(NOT_OURS), the trace's own failure recorded on it (RECORD), a trace handed back to pending because
nothing could be judged (GIVE_BACK), a trace kept, with its result if one was computed, until the
store comes back (KEEP: `settle` writes it or gives it back later), or a stop (STOP). The runner never
raises for an evaluation's failure; an interrupt (KeyboardInterrupt, a cancelled task) gives the
trace back and propagates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from veralith.models import EvaluationResult
from veralith.store import ops
from veralith.work.claims import claims_for
from veralith.work.judged import Judge, Judged
from veralith.work.policy import Action, Decision, decide

if TYPE_CHECKING:
    from veralith.store.protocol import Store, TraceInput

__all__ = ["Judge", "Judged", "Outcome", "Runner", "failure_message"]

logger = logging.getLogger("veralith.work")


@dataclass
class Outcome:
    """What became of one trace (see the module docstring)."""

    trace_id: int
    action: Action
    result: EvaluationResult | None = None      # SAVED; KEEP when computed but not yet written
    error: BaseException | None = None          # what went wrong, for every action but SAVED
    decision: Decision | None = None
    judged: Judged | None = field(default=None, repr=False)   # KEEP: the result waiting for the store


def failure_message(exc: BaseException) -> str:
    """What is stored (and shown) for a failed evaluation: type and message, secrets masked."""
    from veralith.config import redact_configured

    return redact_configured(f"{type(exc).__name__}: {exc}")


class Runner:
    """Judges stored traces of one store with one judge (see the module docstring). Thread-safe.

    `record_failure()` says whether a failure is the trace's to record (False at interpreter exit,
    where a failure is the shutdown's, not the trace's); `passthrough` exceptions propagate as they
    are, with the claim untouched (a batch replay's deferred call)."""

    def __init__(self, store: Store, judge: Judge, *, record_failure: Callable[[], bool] | None = None,
                 passthrough: tuple[type[BaseException], ...] = ()) -> None:
        self.store, self.judge = store, judge
        self.claims = claims_for(store)
        self.record_failure = record_failure
        self.passthrough = passthrough

    # -- one trace --------------------------------------------------------------------------------
    def run(self, trace_id: int, *, claim: bool = True, failed: bool = False, again: bool = False,
            trace: TraceInput | None = None, take: Callable[[int], bool] | None = None) -> Outcome:
        """Claim (unless `claim` is False: the caller holds it, or `take` takes it once the trace is
        judged), judge and write one trace. `failed` / `again` claim a trace whose last evaluation
        failed / any trace nobody is evaluating (re-judging in place). `trace` gives the inputs to
        judge instead of the stored ones (they replace the stored ones with the result)."""
        if claim and take is None and not self.claims.claim(trace_id, failed=failed, again=again):
            return Outcome(trace_id, Action.NOT_OURS)
        try:
            inputs = trace if trace is not None else self.store.read(ops.load_input, trace_id)
            judged = self.judge.judge(self.store, trace_id, inputs)
        except self.passthrough:
            raise
        except BaseException as exc:
            return self._failed(trace_id, exc, take)
        return self._write(trace_id, judged, take)

    async def arun(self, trace_id: int, *, claim: bool = True, failed: bool = False, again: bool = False,
                   trace: TraceInput | None = None, take: Callable[[int], bool] | None = None) -> Outcome:
        """`run` with the judge calls awaited on the running event loop; the store's work runs on a
        thread, so a database round trip never stalls the loop."""
        if claim and take is None and not await asyncio.to_thread(self.claims.claim, trace_id, failed=failed,
                                                                  again=again):
            return Outcome(trace_id, Action.NOT_OURS)
        try:
            inputs = trace if trace is not None else await asyncio.to_thread(self.store.read, ops.load_input, trace_id)
            judged = await self.judge.ajudge(self.store, trace_id, inputs)
        except self.passthrough:
            raise
        except BaseException as exc:
            return await asyncio.to_thread(self._failed, trace_id, exc, take)
        return await asyncio.to_thread(self._write, trace_id, judged, take)

    # -- what an outcome leaves behind ------------------------------------------------------------
    def settle(self, kept: Outcome) -> Outcome:
        """Once the store is back: a KEEP outcome's result written (or, if none was computed, the trace
        given back to pending). Returns the new outcome (KEEP again while the store is still away)."""
        if kept.action is not Action.KEEP:
            return kept
        if kept.judged is not None:
            return self._write(kept.trace_id, kept.judged, None)
        try:
            released = self.claims.release(kept.trace_id)
        except Exception as exc:
            return self._failed(kept.trace_id, exc)
        return Outcome(kept.trace_id, Action.GIVE_BACK if released else Action.KEEP, error=kept.error)

    def give_back(self, trace_id: int) -> bool:
        """Hand a held trace back to pending (a stop); False when the store cannot be reached."""
        return self.claims.release(trace_id)

    # -- internals --------------------------------------------------------------------------------
    def _taken(self, trace_id: int, take: Callable[[int], bool] | None) -> bool:
        """With `take`: the trace taken now (and held from here on), unless it is held already."""
        if take is None or self.claims.holds(trace_id):
            return True
        if not take(trace_id):
            return False
        self.claims.adopt(trace_id)
        return True

    def _write(self, trace_id: int, judged: Judged, take: Callable[[int], bool] | None) -> Outcome:
        result = judged.result
        try:
            if not self._taken(trace_id, take):
                return Outcome(trace_id, Action.NOT_OURS)
            sizes = judged.output_sizes() if judged.output_sizes is not None else []
            saved = self.claims.save(result, sizes)
        except BaseException as exc:
            outcome = self._failed(trace_id, exc)
            if outcome.action is Action.KEEP:
                outcome.result, outcome.judged = result, judged
            return outcome
        result.trace_id = saved
        return Outcome(trace_id, Action.SAVED, result=result)

    def _failed(self, trace_id: int, exc: BaseException, take: Callable[[int], bool] | None = None) -> Outcome:
        """Act on `decide(exc)` for a trace this process holds (or takes now, with `take`, to record its
        failure); re-raise an interrupt once done."""
        decision = decide(exc)
        outcome = Outcome(trace_id, decision.action, error=exc, decision=decision)
        action = decision.action
        if action is Action.NOT_OURS:
            logger.warning("veralith: %s", exc)
            self.claims.drop(trace_id)
        elif action is Action.GIVE_BACK:
            self._quietly(self.claims.release, trace_id)
        elif action is Action.RECORD:
            if take is not None and not self._taken(trace_id, take):
                outcome = Outcome(trace_id, Action.NOT_OURS, error=exc, decision=decision)
            elif self.record_failure is None or self.record_failure():
                outcome = self._record(trace_id, exc, outcome)
            else:
                self.claims.drop(trace_id)
        # KEEP: the claim stays held (its lease renewed) for `settle`; STOP: the caller stops and
        # gives back what it holds.
        if not isinstance(exc, Exception):
            raise exc
        return outcome

    def _record(self, trace_id: int, exc: BaseException, outcome: Outcome) -> Outcome:
        try:
            if not self.claims.fail(trace_id, failure_message(exc)):
                return Outcome(trace_id, Action.NOT_OURS, error=exc, decision=outcome.decision)
        except Exception as store_error:   # the failure could not be recorded: decided like any store error
            follow = decide(store_error)
            return Outcome(trace_id, follow.action if follow.action is not Action.RECORD else Action.STOP,
                           error=store_error, decision=follow)
        return outcome

    @staticmethod
    def _quietly(step: Callable[[int], Any], trace_id: int) -> None:
        try:
            step(trace_id)
        except Exception:  # the claim then ends with the process, or its lease times out
            logger.debug("veralith: could not give trace %s back", trace_id, exc_info=True)
