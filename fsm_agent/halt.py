"""Halt reasons: one frozen enum, each reason mapped to exactly one terminal state.

The first six are the halt contract's own reasons, spelled exactly as it spells them.
Nothing outside this enum is ever written as a halt reason.
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Final


class HaltReason(enum.StrEnum):
    """Why a run ended. Frozen: adding a member is a reviewed change of the contract."""

    COMPLETED = "completed"
    MAX_STEPS = "max_steps"
    WALL_CLOCK = "wall_clock"
    TOOL_ERROR = "tool_error"
    SCHEMA_FAIL = "schema_fail"
    EMPTY_RESPONSE = "empty_response"
    COST_CAP = "cost_cap"
    RETRY_BUDGET = "retry_budget"
    TOOL_TIMEOUT = "tool_timeout"
    THRASHING = "thrashing"
    HANDOFF_REQUESTED = "handoff_requested"
    TOOL_REFUSED = "tool_refused"
    HALT_PATH_REFUSED = "halt_path_refused"
    GUARD_REFUSED = "guard_refused"
    NO_TRANSITION = "no_transition"
    ROUTING_FROZEN = "routing_frozen"
    SIDE_EFFECT_UNKNOWN = "side_effect_unknown"
    UNGROUNDED_ANSWER = "ungrounded_answer"
    REPEAT_REFUSED = "repeat_refused"
    APPROVAL_REQUIRED = "approval_required"
    WAIT_EXPIRED = "wait_expired"
    JOURNAL_FAILED = "journal_failed"
    INTERRUPTED = "interrupted"
    INTERNAL_ERROR = "internal_error"


#: Halts the runtime imposes from outside the declaration (a signal, an error, an operator's
#: routing freeze, a resumed run's unreceipted side effect): replay accepts them as recorded
#: facts instead of re-deciding them.
IMPOSED: Final = frozenset(
    {
        HaltReason.INTERRUPTED,
        HaltReason.INTERNAL_ERROR,
        HaltReason.ROUTING_FROZEN,
        HaltReason.SIDE_EFFECT_UNKNOWN,
        HaltReason.JOURNAL_FAILED,
        HaltReason.WAIT_EXPIRED,
    }
)

#: Halts a person's decision may continue, and what the run waits for at each (where the
#: declaration has an edge out of `handoff` for it: `fsm_agent.runtime.decisions`).
AWAITS: Final = MappingProxyType(
    {HaltReason.APPROVAL_REQUIRED: "approval", HaltReason.HANDOFF_REQUESTED: "answer"}
)

#: Halts that are errors: a tool failed, the runtime or its journal did. Every other halt is
#: an outcome the declaration or its policy chose (a handoff asked for, a budget spent, a
#: refusal), or the operator's; traces mark only these as ERROR.
ERROR_HALTS: Final = frozenset(
    {HaltReason.TOOL_ERROR, HaltReason.INTERNAL_ERROR, HaltReason.JOURNAL_FAILED}
)

DONE: Final = "done"
BUDGET_EXHAUSTED: Final = "budget_exhausted"
HANDOFF: Final = "handoff"
TERMINAL_STATES: Final = (DONE, BUDGET_EXHAUSTED, HANDOFF)

#: reason -> the one terminal state it ends in.
TERMINAL_STATE: Final = MappingProxyType(
    {
        HaltReason.COMPLETED: DONE,
        HaltReason.MAX_STEPS: BUDGET_EXHAUSTED,
        HaltReason.WALL_CLOCK: BUDGET_EXHAUSTED,
        HaltReason.COST_CAP: BUDGET_EXHAUSTED,
        HaltReason.RETRY_BUDGET: BUDGET_EXHAUSTED,
        HaltReason.TOOL_TIMEOUT: BUDGET_EXHAUSTED,
        HaltReason.THRASHING: BUDGET_EXHAUSTED,
        HaltReason.TOOL_ERROR: HANDOFF,
        HaltReason.SCHEMA_FAIL: HANDOFF,
        HaltReason.EMPTY_RESPONSE: HANDOFF,
        HaltReason.HANDOFF_REQUESTED: HANDOFF,
        HaltReason.TOOL_REFUSED: HANDOFF,
        HaltReason.HALT_PATH_REFUSED: HANDOFF,
        HaltReason.GUARD_REFUSED: HANDOFF,
        HaltReason.NO_TRANSITION: HANDOFF,
        HaltReason.ROUTING_FROZEN: HANDOFF,
        HaltReason.SIDE_EFFECT_UNKNOWN: HANDOFF,
        HaltReason.UNGROUNDED_ANSWER: HANDOFF,
        HaltReason.REPEAT_REFUSED: HANDOFF,
        HaltReason.APPROVAL_REQUIRED: HANDOFF,
        HaltReason.WAIT_EXPIRED: BUDGET_EXHAUSTED,
        HaltReason.JOURNAL_FAILED: HANDOFF,
        HaltReason.INTERRUPTED: HANDOFF,
        HaltReason.INTERNAL_ERROR: HANDOFF,
    }
)

#: reason -> the meter named in the `cannot: <meter> budget` answer at a cap.
CANNOT_METER: Final = MappingProxyType(
    {
        HaltReason.MAX_STEPS: "step",
        HaltReason.WALL_CLOCK: "time",
        HaltReason.COST_CAP: "money",
        HaltReason.RETRY_BUDGET: "retry",
        HaltReason.TOOL_TIMEOUT: "tool time",
        HaltReason.THRASHING: "repeat",
        HaltReason.WAIT_EXPIRED: "wait",
    }
)

#: terminal state -> process exit code of `fsm-agent run`.
EXIT_CODE: Final = MappingProxyType({DONE: 0, BUDGET_EXHAUSTED: 3, HANDOFF: 4})
EXIT_INVALID_INPUT: Final = 2
EXIT_INTERNAL_ERROR: Final = 70
#: `run` / `resume` of a run a person paused: not a halt; the run waits for `resume`.
EXIT_PAUSED: Final = 75


def terminal_state(reason: HaltReason) -> str:
    """The terminal state a halt reason ends in."""
    return TERMINAL_STATE[reason]


def cannot_answer(reason: HaltReason) -> str | None:
    """`cannot: step budget` and friends for a budget halt; None for any other reason."""
    meter = CANNOT_METER.get(reason)
    return None if meter is None else f"cannot: {meter} budget"


def exit_code(reason: HaltReason, signum: int | None = None) -> int:
    """Exit code for a run that halted with `reason` (128+signal when a signal ended it)."""
    if reason is HaltReason.INTERRUPTED and signum:
        return 128 + signum
    if reason is HaltReason.INTERNAL_ERROR:  # a fault (user code raised), not a handoff
        return EXIT_INTERNAL_ERROR
    return EXIT_CODE[terminal_state(reason)]


#: Exit codes of `fsm-agent run` that are not one halt's, -> what they mean.
_OTHER_EXITS: Final = MappingProxyType(
    {
        EXIT_INVALID_INPUT: "invalid input, before anything ran: a bad machine, policy, budget,"
        " model spec or endpoint, tools module, option or output path",
        EXIT_INTERNAL_ERROR: "internal error: user code raised (the halt is internal_error), or"
        " the journal cannot be written",
        EXIT_PAUSED: "a person paused the run (fsm-agent pause); it waits for fsm-agent resume",
    }
)
#: The exit code of a run a signal ended, as the help spells it.
SIGNAL_EXIT: Final = "128+N"


def run_exit_codes() -> dict[str, str]:
    """Every exit code `fsm-agent run` can return -> what it means, in numeric order: each
    halt's (from `exit_code`, naming the reasons that end there), invalid input, internal
    error, paused, and 128+N for a signal."""
    reasons: dict[int, list[str]] = {}
    for reason in HaltReason:
        reasons.setdefault(exit_code(reason), []).append(reason.value)
    states = {code: state for state, code in EXIT_CODE.items()}
    meaning: dict[int, str] = {}
    for code in sorted({*reasons, *_OTHER_EXITS}):
        halts = ", ".join(reasons.get(code, ()))
        if code in states:
            meaning[code] = f"the run ended in {states[code]} ({halts})"
        else:
            meaning[code] = _OTHER_EXITS[code]
    table = {str(code): text for code, text in meaning.items()}
    table[SIGNAL_EXIT] = "signal N interrupted the run (interrupted; 143 SIGTERM, 130 SIGINT)"
    return table
