"""The run's allow-list: a declaration's `tools:`, narrowed by the operator's `--allow`, or,
for a machine that lists none, what `--allow` names (`fsm_agent.runtime.contract.allow_list`).

Through the real CLI, with the shop's tools module of `tests/test_contract.py` (its calls
counted in a ledger file, so "it never ran" is a fact).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm_agent.errors import InvalidInputError
from fsm_agent.runtime.contract import allow_list
from tests.test_contract import call, invoke, ledger, machine, record, run, shop

__all__ = ["shop"]  # the fixture, imported for the tests below

REGISTERED = ("lookup", "refund", "wire_money")


@pytest.mark.parametrize(
    ("declared", "allow", "expected"),
    [
        (None, None, ()),  # lists none, grants none, registers none: nothing runs
        (None, ("lookup",), ("lookup",)),  # the operator's grant is the whole list
        (("lookup", "refund"), None, ("lookup", "refund")),
        (("lookup", "refund"), ("refund",), ("refund",)),  # narrowed
        (("lookup", "gone"), None, ("lookup",)),  # a declared tool nobody registered
        ((), None, ()),
        (None, ("lookup", "lookup"), ("lookup",)),
    ],
)
def test_the_allow_list_is_what_was_granted_never_what_was_found(
    declared: tuple[str, ...] | None,
    allow: tuple[str, ...] | None,
    expected: tuple[str, ...],
) -> None:
    registered = () if declared is None and allow is None else REGISTERED
    assert allow_list(declared, registered, allow) == expected


def test_tools_registered_for_a_machine_that_lists_none_and_allows_none_are_refused() -> None:
    # Discovery is not permission: a tools module's tools, nobody's grant, refused before
    # the run starts (not a tool_refused at the first proposal).
    with pytest.raises(InvalidInputError, match="registers tools, it does not permit them"):
        allow_list(None, REGISTERED, None)


@pytest.mark.parametrize(
    ("declared", "allow", "says"),
    [
        (("lookup",), ("wire_money",), "narrows the declaration, never widens it"),
        ((), ("lookup",), "narrows the declaration, never widens it"),
        (None, ("click_pay",), "no registered tool is"),
    ],
)
def test_an_allow_list_that_would_widen_or_names_nothing_is_refused(
    declared: tuple[str, ...] | None, allow: tuple[str, ...], says: str
) -> None:
    with pytest.raises(InvalidInputError, match=says):
        allow_list(declared, REGISTERED, allow)


def test_allow_grants_only_what_it_names(tmp_path: Path, shop: str) -> None:
    # wire_money is registered (and privileged), lookup is granted: wire_money never runs.
    replies = [call("wire_money", account="31337", cents=100_000_000)]
    result = run(tmp_path, machine(tmp_path, drop=("not tool_allowed",)), shop, replies,
                 "--allow", "lookup")  # fmt: skip
    assert result.exit_code == 4, result.output
    rec = record(tmp_path)
    assert rec.halt_reason == "tool_refused"
    assert ledger(tmp_path) == []
    assert rec.handoff is not None
    assert "not on the run's allow-list (lookup)" in rec.handoff.why


def test_allow_runs_a_granted_tool_on_a_machine_that_lists_none(tmp_path: Path, shop: str) -> None:
    replies = [call("lookup", q="vault"), {"answer": "swordfish"}]
    result = run(tmp_path, machine(tmp_path), shop, replies, "--allow", "lookup,refund")
    assert result.exit_code == 0, result.output
    assert record(tmp_path).halt_reason == "completed"
    assert ledger(tmp_path) == ["lookup [('q', 'vault')]"]


def test_allow_cannot_widen_a_declared_list(tmp_path: Path, shop: str) -> None:
    spec = machine(tmp_path, tools=["lookup"])
    result = run(tmp_path, spec, shop, [call("wire_money", account="1", cents=5)],
                 "--allow", "lookup,wire_money")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "'wire_money'" in result.output
    assert "never widens it" in result.output
    assert ledger(tmp_path) == []


def test_an_empty_name_in_allow_is_a_usage_error(tmp_path: Path, shop: str) -> None:
    result = run(tmp_path, machine(tmp_path), shop, [{"answer": "x"}], "--allow", "lookup,")
    assert result.exit_code == 2, result.output
    assert "an empty tool name" in result.output


def test_a_tools_module_alone_permits_nothing_and_the_run_never_starts(
    tmp_path: Path, shop: str
) -> None:
    # The machine lists no tools, the operator names none: the tools the module registers
    # are found, not allowed. The run is refused before anything is journaled or called.
    replies = [call("wire_money", account="31337", cents=100_000_000)]
    result = run(tmp_path, machine(tmp_path, drop=("not tool_allowed",)), shop, replies,
                 grant=False)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "lists no tools (no tools:) and no allow-list was given" in result.output
    assert "registered tools (lookup, refund, charge," in result.output
    assert "wire_money" in result.output
    assert "--allow" in result.output
    assert "Traceback" not in result.output
    assert ledger(tmp_path) == []
    assert not (tmp_path / "j.db").exists()
    assert not (tmp_path / "r.json").exists()


def test_a_machine_that_lists_no_tools_runs_without_a_tools_module(tmp_path: Path) -> None:
    # No registry, no grant: a run that only answers (and is refused: nothing backs it).
    script = tmp_path / "replies.json"
    script.write_text('[{"handoff": {"why": "a person should look"}}]', encoding="utf-8")
    db, rec = str(tmp_path / "j.db"), str(tmp_path / "r.json")
    result = invoke("run", str(machine(tmp_path)), "--task", "t", "--model", f"scripted:{script}",
                    "--db", db, "--record", rec, "-q")  # fmt: skip
    assert result.exit_code == 4, result.output
    assert record(tmp_path).halt_reason == "handoff_requested"
