"""One failure policy for every loop that claims and judges traces.

`log()`'s background evaluator, `veralith worker`, `eval`, `resume` and `batch collect` each ask
`decide(error)` what an evaluation that raised means, and act on the answer the same way:

| error                                   | action    | the trace                    | a drain* | a long-running loop  |
|-----------------------------------------|-----------|------------------------------|----------|----------------------|
| the judge server is down                | GIVE_BACK | pending again, anyone's      | stops    | waits its cool-down  |
| the store cannot be reached             | KEEP      | still ours, its result kept  | stops    | waits, then writes   |
| the store stopped taking writes         | STOP      | as it is, until we exit      | stops    | stops                |
| the server refuses the key              | GIVE_BACK | pending again, anyone's      | stops    | waits a minute       |
| a configuration error                   | STOP      | given back                   | stops    | stops                |
| our lease was taken over                | NOT_OURS  | the new holder decides       | goes on  | goes on              |
| anything else (the trace's own failure) | RECORD    | status error, message kept   | goes on  | goes on              |

(*a drain: `eval`, `resume`, `worker --once`, `batch collect`: it ends with exit 2 and one line,
the rest pending.) An interrupt (Ctrl-C, SIGTERM, a cancelled task) gives back what is unfinished.
Records a store refuses while being shipped or imported are set aside with their reason
(`intake`), never a reason to stop shipping the others.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from veralith.config import ConfigError
from veralith.errors import JudgeCallError, JudgeServerDown, StoreError
from veralith.store.errors import DuplicateExternalId, StoreUnavailable, WritesStopped
from veralith.work.claims import LeaseLost

__all__ = ["STORE_BACKOFF_MAX_S", "Action", "Decision", "decide", "intake"]

STORE_BACKOFF_MAX_S = 30.0   # the longest a long-running loop waits between tries of an unavailable store


class Action(enum.Enum):
    SAVED = "saved"            # the outcome is written (not an answer of `decide`)
    NOT_OURS = "not ours"      # another process claimed it first or took it over: nothing written
    RECORD = "record"          # the trace's own failure: recorded on it (status error)
    GIVE_BACK = "give back"    # nothing was judged: pending again, for anyone
    KEEP = "keep"              # the store went away: the claim (and a computed result) waits for it
    STOP = "stop"              # nothing more can be done in this process
    SET_ASIDE = "set aside"    # a record the store refuses: kept apart with its reason (intake only)
    RETRY = "retry"            # the store cannot take it now: it stays where it is (intake only)


@dataclass(frozen=True)
class Decision:
    action: Action
    stops_drain: bool = False   # a drain ends here (exit 2, one line), the rest left pending
    wait_s: float = 0.0         # how long a long-running loop waits before it claims more


def decide(error: BaseException) -> Decision:
    """What an evaluation that raised `error` means (see the module docstring)."""
    if isinstance(error, LeaseLost):
        return Decision(Action.NOT_OURS)
    if isinstance(error, JudgeServerDown):
        return Decision(Action.GIVE_BACK, stops_drain=True, wait_s=error.retry_after_s)
    if isinstance(error, StoreUnavailable):
        return Decision(Action.KEEP, stops_drain=True, wait_s=1.0)
    if isinstance(error, (WritesStopped, ConfigError)):
        return Decision(Action.STOP, stops_drain=True)
    if isinstance(error, JudgeCallError) and error.kind == "auth":
        # The server refused the key or its permissions: every trace would fail alike; not a trace's own.
        return Decision(Action.GIVE_BACK, stops_drain=True, wait_s=60.0)
    if isinstance(error, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
        return Decision(Action.GIVE_BACK, stops_drain=True)
    return Decision(Action.RECORD)


def intake(error: BaseException) -> Decision:
    """What a record the store would not take means while shipping or importing: RETRY (the store
    is away: it stays spooled), STOP (the store stopped taking writes), else SET_ASIDE (this record
    is refused; the others go on)."""
    if isinstance(error, StoreUnavailable):
        return Decision(Action.RETRY, wait_s=1.0)
    if isinstance(error, (WritesStopped, ConfigError)):
        return Decision(Action.STOP, stops_drain=True)
    if isinstance(error, StoreError) and not isinstance(error, DuplicateExternalId):
        return Decision(Action.STOP, stops_drain=True)   # e.g. a schema newer than this code
    return Decision(Action.SET_ASIDE)
