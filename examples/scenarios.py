"""Every runnable example scenario, as data; `fsm-agent demo` and the tests run them all.

A scenario names its machine (a `machines` package name, or a YAML path relative to this
package), its scripted model replies (a JSON file relative to this package), its tools module
(and, for a machine that lists no tools, those its runs may call), its budget overrides and
the one halt reason it must end with.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import attrs

from fsm_agent import (
    LOCAL,
    HaltReason,
    HaltRecord,
    Lane,
    ScriptedModel,
    load_tools,
    run,
    terminal_state,
)
from fsm_agent.journal.store import Event, Store

EXAMPLES_DIR: Final = Path(__file__).parent
FREE_LANE: Final = Lane(kind="http", tier="free")


@attrs.frozen(kw_only=True)
class Scenario:
    """One runnable scenario and the halt it must end in."""

    name: str
    example: str
    machine: str
    replies: str
    tools: str
    task: str
    expected: HaltReason
    description: str
    budgets: Mapping[str, int | float] = attrs.field(factory=dict)
    thrash_limit: int | None = None
    halt_lane: Lane = LOCAL
    env: Mapping[str, str] = attrs.field(factory=dict)
    #: the tools the run may call (`--allow`), for a machine that lists none
    allow: tuple[str, ...] | None = None

    @property
    def expected_state(self) -> str:
        """The terminal state the expected halt reason ends in."""
        return terminal_state(self.expected)


_LAB, _PAY, _STOP = "halt_lab", "payments_retry", "stop_conditions"
_LAB_TASK = "Find the lab password in the lookup tool."
_PAY_TASK = "Capture order ord_1001 (42.00) and confirm the capture."
_PAY_MACHINE = "payments_retry/payments.yaml"
_PAY_TOOLS = "fsm_agent.examples.payments_retry.tools"
_STOP_TASK = "How long is the refund window?"
_STOP_TOOLS = "fsm_agent.examples.stop_conditions.tools"
#: agent_loop lists no tools: each example grants those its runs may call (`--allow`)
_LAB_ALLOW = ("lookup", "slow_lookup", "hang")
_STOP_ALLOW = ("search",)

SCENARIOS: Final[list[Scenario]] = [
    # --- the halt lab -------------------------------------------------------------------
    Scenario(
        name="halt_lab.looping",
        example=_LAB,
        machine="agent_loop",
        replies="halt_lab/looping.json",
        tools="fsm_agent.examples.halt_lab.tools",
        allow=_LAB_ALLOW,
        task=_LAB_TASK,
        expected=HaltReason.MAX_STEPS,
        description="lookup always says 'refine your query'; the step cap wins, not the model",
    ),
    Scenario(
        name="halt_lab.wall_clock",
        example=_LAB,
        machine="agent_loop",
        replies="halt_lab/slow.json",
        tools="fsm_agent.examples.halt_lab.tools",
        allow=_LAB_ALLOW,
        task=_LAB_TASK,
        budgets={"wall_clock_ms": 1000},
        expected=HaltReason.WALL_CLOCK,
        description="the lookup would find the fact after 3000 ms; the 1000 ms clock stops it",
    ),
    # agent_loop retries a rejected reply while max_retries (2) remains, and every retry is
    # a step: the script has three prose replies, so the third one ends the run.
    Scenario(
        name="halt_lab.chatty",
        example=_LAB,
        machine="agent_loop",
        replies="halt_lab/chatty.json",
        tools="fsm_agent.examples.halt_lab.tools",
        allow=_LAB_ALLOW,
        task=_LAB_TASK,
        expected=HaltReason.SCHEMA_FAIL,
        description="three chatty paragraphs: two retries, then schema_fail; prose never wins",
    ),
    Scenario(
        name="halt_lab.completed",
        example=_LAB,
        machine="agent_loop",
        replies="halt_lab/proper.json",
        tools="fsm_agent.examples.halt_lab.tools",
        allow=_LAB_ALLOW,
        task=_LAB_TASK,
        expected=HaltReason.COMPLETED,
        description="lookup returns a receipt, then {'answer': 'swordfish'} is backed by it",
    ),
    # --- the payments retry agent --------------------------------------------------------
    Scenario(
        name="payments_retry.settles",
        example=_PAY,
        machine=_PAY_MACHINE,
        replies="payments_retry/settles.json",
        tools=_PAY_TOOLS,
        task=_PAY_TASK,
        expected=HaltReason.COMPLETED,
        description="206 + empty id twice (each retry a step), then 200 cap_1 and its webhook",
    ),
    Scenario(
        name="payments_retry.done_flag",
        example=_PAY,
        machine=_PAY_MACHINE,
        replies="payments_retry/done_flag.json",
        tools=_PAY_TOOLS,
        task=_PAY_TASK,
        expected=HaltReason.COMPLETED,
        description="'done: true' and 'captured!' before any receipt are ignored; receipts end it",
    ),
    Scenario(
        name="payments_retry.free_lane",
        example=_PAY,
        machine=_PAY_MACHINE,
        replies="payments_retry/settles.json",
        tools=_PAY_TOOLS,
        task=_PAY_TASK,
        halt_lane=FREE_LANE,
        expected=HaltReason.HALT_PATH_REFUSED,
        description="halt vote routed to a free http lane: refused before any tool runs",
    ),
    Scenario(
        name="payments_retry.pending_forever",
        example=_PAY,
        machine=_PAY_MACHINE,
        replies="payments_retry/pending_forever.json",
        tools=_PAY_TOOLS,
        task="Capture order ord_2002 (9.90) and confirm the capture.",
        expected=HaltReason.MAX_STEPS,
        description="206 forever: the step budget ends it, never a success",
    ),
    # --- the stop conditions ---------------------------------------------------------------
    Scenario(
        name="stop_conditions.happy",
        example=_STOP,
        machine="agent_loop",
        replies="stop_conditions/happy.json",
        tools=_STOP_TOOLS,
        allow=_STOP_ALLOW,
        task=_STOP_TASK,
        expected=HaltReason.COMPLETED,
        description="search returns final with a receipt: goal_satisfied on step 1",
    ),
    Scenario(
        name="stop_conditions.stuck",
        example=_STOP,
        machine="agent_loop",
        replies="stop_conditions/stuck.json",
        tools=_STOP_TOOLS,
        allow=_STOP_ALLOW,
        task=_STOP_TASK,
        budgets={"max_steps": 3},
        expected=HaltReason.MAX_STEPS,
        description="three useless searches, then 'cannot: step budget' (the guess is never asked)",
    ),
    Scenario(
        name="stop_conditions.handoff",
        example=_STOP,
        machine="agent_loop",
        replies="stop_conditions/handoff.json",
        tools=_STOP_TOOLS,
        allow=_STOP_ALLOW,
        task="Pay invoice inv_7.",
        expected=HaltReason.HANDOFF_REQUESTED,
        description="the model asks for a human ('would need to click Pay'): a packet, not a crash",
    ),
    Scenario(
        name="stop_conditions.unsafe_tool",
        example=_STOP,
        machine="agent_loop",
        replies="stop_conditions/unsafe_tool.json",
        tools=_STOP_TOOLS,
        allow=_STOP_ALLOW,
        task="Pay invoice inv_7.",
        expected=HaltReason.TOOL_REFUSED,
        description="click_pay is not allow-listed: refused before it runs, its args frozen",
    ),
    Scenario(
        name="stop_conditions.thrashing",
        example=_STOP,
        machine="agent_loop",
        replies="stop_conditions/thrash.json",
        tools=_STOP_TOOLS,
        allow=_STOP_ALLOW,
        task=_STOP_TASK,
        thrash_limit=3,
        expected=HaltReason.THRASHING,
        description="the same search with the same args three times in a row: thrashing",
    ),
]


def example_path(ref: str) -> str:
    """A file reference relative to this package as an absolute path; a bare name unchanged."""
    if ref.endswith((".yaml", ".yml", ".json")):
        return str(EXAMPLES_DIR / ref)
    return ref


@contextmanager
def environment(overrides: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration; restore the previous values after."""
    saved = {name: os.environ.get(name) for name in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_scenario(
    scenario: Scenario,
    *,
    store: Store | str | os.PathLike[str],
    record_path: str | os.PathLike[str],
    on_transition: Callable[[Event], None] | None = None,
) -> HaltRecord:
    """Run one scenario to its halt on `store`; the record is also written to `record_path`."""
    with environment(scenario.env):
        return run(
            example_path(scenario.machine),
            task=scenario.task,
            model=ScriptedModel.from_file(example_path(scenario.replies)),
            tools=load_tools(scenario.tools),
            store=store,
            budgets=scenario.budgets,
            record_path=record_path,
            halt_lane=scenario.halt_lane,
            thrash_limit=scenario.thrash_limit,
            on_transition=on_transition,
            allow=scenario.allow,
        )


def scenarios_of(example: str) -> list[Scenario]:
    """The scenarios of one example package, in declaration order."""
    return [s for s in SCENARIOS if s.example == example]
