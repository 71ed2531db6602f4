"""The runtime's contract holds whatever a declaration says (`fsm_agent.runtime.contract`).

The incidents as they were reported, through the real CLI, each with a tools module the test
writes (its calls counted in a ledger file, so "it ran twice" is a fact, not a guess), and a
declaration that leaves out the guard that used to be the only protection.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from fsm_agent.declaration.load import load_machine
from fsm_agent.runtime.record import HaltRecord, read_record

MACHINES = Path(__file__).resolve().parent.parent / "machines"

#: A shop: a read, a refund (201 + id), a charge that hangs on its first call, an e-mail (202,
#: empty id; repeatable), an idempotent capture that hangs on its first call, and a
#: privileged wire transfer that is registered but never allow-listed.
SHOP = """
import os, time
from fsm_agent import Receipt, Tool, ToolRegistry, ToolResult

def _note(name, **args):
    with open(os.environ["SHOP_LEDGER"], "a", encoding="utf-8") as f:
        f.write(name + " " + repr(sorted(args.items())) + "\\n")
    with open(os.environ["SHOP_LEDGER"], encoding="utf-8") as f:
        return sum(1 for line in f if line.startswith(name + " "))

def lookup(q: str = "") -> ToolResult:
    _note("lookup", q=q)
    return ToolResult(receipts=(Receipt(status=200, id="fact:1"),),
                      observation={"fact": "swordfish"}, final="swordfish")

def refund(customer: str, cents: int) -> ToolResult:
    n = _note("refund", customer=customer, cents=cents)
    return ToolResult(receipts=(Receipt(status=201, id=f"rf_{n}"),),
                      observation={"refund_id": f"rf_{n}", "cents": cents})

def charge(card: str, cents: int) -> ToolResult:
    n = _note("charge", card=card, cents=cents)
    if n == 1:
        time.sleep(3)  # charged, then hangs past its time cap
    return ToolResult(receipts=(Receipt(status=201, id=f"ch_{n}"),),
                      observation={"charge_id": f"ch_{n}"})

def capture(order: str) -> ToolResult:
    n = _note("capture", order=order)
    if n == 1:
        time.sleep(3)
    return ToolResult(receipts=(Receipt(status=200, id="cap_1", idempotency_key=order),),
                      observation={"capture_id": "cap_1"})

def email_customer(customer: str, text: str) -> ToolResult:
    _note("email_customer", customer=customer, text=text)
    return ToolResult(receipts=(Receipt(status=202, id=""),), observation={"queued": True})

def wire_money(account: str, cents: int) -> ToolResult:
    _note("wire_money", account=account, cents=cents)
    return ToolResult(receipts=(Receipt(status=200, id="w_1"),), observation={"sent": cents})

TOOLS = ToolRegistry((
    Tool("lookup", lookup, side_effect=False),
    Tool("refund", refund),
    Tool("charge", charge),
    Tool("capture", capture, idempotent=True),
    Tool("email_customer", email_customer, repeatable=True),
    Tool("wire_money", wire_money, privileged=True),
))
"""


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_call": {"name": name, "args": args}}


def machine(
    tmp_path: Path,
    *,
    drop: tuple[str, ...] = (),
    swap: tuple[str, str] | None = None,
    tools: list[str] | None = None,
    edit: tuple[str, str] | None = None,
) -> Path:
    """A copy of the canonical machine: lines holding any of `drop` removed, `swap`'s guard
    replaced on the answer edge into done, `edit` applied as a plain text replacement."""
    text = (MACHINES / "agent_loop.yaml").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not any(d in ln for d in drop)]
    text = "\n".join(lines) + "\n"
    if swap is not None:
        text = text.replace(swap[0], swap[1], 1)
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1])
    text = text.replace("name: agent_loop", "name: shop_loop")
    if tools is not None:
        text = text.replace("initial: drafting", f"initial: drafting\ntools: {json.dumps(tools)}")
    path = tmp_path / "shop.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def goal_on_answer(tmp_path: Path) -> Path:
    """The answer edge into done reads goal_satisfied (the last tool's receipts), not the
    answer; receipts alone never complete the run."""
    return machine(
        tmp_path,
        drop=("trigger: collected, source: awaiting_receipts, dest: done",),
        swap=("guards: [answer_grounded, judge_agrees]", "guards: [goal_satisfied, judge_agrees]"),
    )


def timeout_to_drafting(tmp_path: Path) -> Path:
    """A timed-out call goes back to drafting, where the model may propose it again."""
    return machine(
        tmp_path,
        edit=(
            "{trigger: tool_timed_out, source: tool_pending, dest: budget_exhausted,"
            " halt: tool_timeout}",
            "{trigger: tool_timed_out, source: tool_pending, dest: drafting}",
        ),
    )


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The shop's tools module, under a name of its own (modules stay imported), in the
    working directory the CLI's `--tools` looks in."""
    name = f"shop_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(SHOP, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHOP_LEDGER", str(tmp_path / "ledger.txt"))
    return name


def ledger(tmp_path: Path) -> list[str]:
    path = tmp_path / "ledger.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


#: Every tool of the shop: what a run of a machine that lists no tools is granted (`--allow`).
EVERY_TOOL = "lookup,refund,charge,capture,email_customer,wire_money"


def run(
    tmp_path: Path,
    spec: Path | str,
    tools: str,
    replies: list[Any],
    *extra: str,
    grant: bool = True,
) -> Result:
    """`fsm-agent run` of `spec` with the shop; a machine that lists no tools is granted
    every tool of the shop by name (`grant`), as an operator's `--allow` does."""
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies), encoding="utf-8")
    if grant and load_machine(str(spec)).tools is None and "--allow" not in extra:
        extra = (*extra, "--allow", EVERY_TOOL)
    return invoke("run", str(spec), "--task", "help the customer", "--model", f"scripted:{script}",
                  "--tools", tools, "--db", str(tmp_path / "j.db"),
                  "--record", str(tmp_path / "r.json"), "-q", *extra)  # fmt: skip


def record(tmp_path: Path) -> HaltRecord:
    return read_record(tmp_path / "r.json")


def proven(tmp_path: Path, result: Result, reason: str) -> str:
    """`show` and `replay` of the run agree with its record: the halt is proven."""
    rid = result.output.split()[1]
    shown = invoke("show", rid, "--db", str(tmp_path / "j.db"))
    assert f"halted: {reason} (handoff)" in shown.output, shown.output
    replayed = invoke("replay", rid, "--db", str(tmp_path / "j.db"))
    assert replayed.exit_code == 0, replayed.output
    assert f"halt {reason} proven" in replayed.output, replayed.output
    return shown.output


# --- the incidents ----------------------------------------------------------------------------


def test_an_invented_answer_never_completes_whatever_guard_the_declaration_names(
    tmp_path: Path, shop: str
) -> None:
    # The answer edge into done reads goal_satisfied (the last tool's receipts), not the answer.
    spec = goal_on_answer(tmp_path)
    invented = "The vault code is 99999. Wire $1,000,000 to account 31337."
    result = run(tmp_path, spec, shop, [call("lookup", q="vault"), {"answer": invented}])
    assert result.exit_code == 4, result.output
    rec = record(tmp_path)
    assert rec.halt_reason == "ungrounded_answer"
    assert rec.answer is None
    assert rec.grounded_by == ()
    assert rec.handoff is not None
    assert "'99999'" in rec.handoff.why
    shown = proven(tmp_path, result, "ungrounded_answer")
    assert "runtime:grounded" in shown


def test_a_grounded_answer_still_completes_on_the_same_declaration(
    tmp_path: Path, shop: str
) -> None:
    spec = goal_on_answer(tmp_path)
    result = run(tmp_path, spec, shop, [call("lookup", q="vault"), {"answer": "swordfish"}])
    assert result.exit_code == 0, result.output
    assert record(tmp_path).halt_reason == "completed"


def test_a_tool_off_the_allow_list_never_runs_without_a_tool_allowed_guard(
    tmp_path: Path, shop: str
) -> None:
    spec = machine(tmp_path, drop=("[not tool_allowed]",), tools=["lookup"])
    replies = [call("wire_money", account="31337", cents=100_000_000), {"answer": "sent"}]
    result = run(tmp_path, spec, shop, replies)
    assert result.exit_code == 4, result.output
    rec = record(tmp_path)
    assert rec.halt_reason == "tool_refused"
    assert "not on the run's allow-list (lookup)" in (rec.error or "")
    assert rec.handoff is not None
    assert rec.handoff.frozen_args == {
        "tool": "wire_money",
        "args": {"account": "31337", "cents": 100_000_000},
    }
    assert ledger(tmp_path) == []  # never ran
    proven(tmp_path, result, "tool_refused")


def test_a_timed_out_payment_is_never_taken_twice(tmp_path: Path, shop: str) -> None:
    # The declaration sends a timed-out call back to drafting; the model proposes it again.
    spec = timeout_to_drafting(tmp_path)
    charge = call("charge", card="4242", cents=500)
    result = run(tmp_path, spec, shop, [charge, charge, {"answer": "charged ch_2"}],
                 "--tool-timeout-ms", "1000")  # fmt: skip
    assert result.exit_code == 4, result.output
    rec = record(tmp_path)
    assert rec.halt_reason == "side_effect_unknown"
    assert ledger(tmp_path) == ["charge [('card', '4242'), ('cents', 500)]"]  # charged once
    assert rec.unreceipted == ('step 1: charge({"card": "4242", "cents": 500}) -> timed out'
                               " without receipts",)  # fmt: skip
    assert "not declared idempotent" in (rec.error or "")
    proven(tmp_path, result, "side_effect_unknown")


def test_an_idempotent_call_that_timed_out_may_be_made_again_and_settles(
    tmp_path: Path, shop: str
) -> None:
    spec = timeout_to_drafting(tmp_path)
    capture = call("capture", order="ord_1")
    result = run(tmp_path, spec, shop, [capture, capture, {"answer": "captured cap_1"}],
                 "--tool-timeout-ms", "1000")  # fmt: skip
    assert result.exit_code == 0, result.output
    rec = record(tmp_path)
    assert rec.halt_reason == "completed"
    assert rec.unreceipted == ()
    assert len(ledger(tmp_path)) == 2


def test_a_completed_refund_is_not_made_again(tmp_path: Path, shop: str) -> None:
    # The real model's incident: the same refund after each complete receipt.
    refund = call("refund", customer="C-17", cents=500)
    result = run(tmp_path, "agent_loop", shop, [refund, refund, refund, refund])
    assert result.exit_code == 4, result.output
    rec = record(tmp_path)
    assert rec.halt_reason == "repeat_refused"
    assert ledger(tmp_path) == ["refund [('cents', 500), ('customer', 'C-17')]"]
    assert rec.handoff is not None
    why = rec.handoff.why
    # both calls named: the one proposed again and the earlier one that took effect
    assert 'refund({"cents": 500, "customer": "C-17"}) was proposed again' in why
    assert 'step 1: refund({"cents": 500, "customer": "C-17"}) -> receipted (rf_1)' in why
    proven(tmp_path, result, "repeat_refused")


def test_a_repeatable_tool_repeats_and_every_call_is_named(tmp_path: Path, shop: str) -> None:
    mail = call("email_customer", customer="C-17", text="your refund")
    result = run(
        tmp_path, "agent_loop", shop, [mail, mail, {"answer": "sent"}] + [{"answer": "x"}] * 3
    )
    assert result.exit_code == 4, result.output
    rec = record(tmp_path)
    assert len(ledger(tmp_path)) == 2  # declared repeatable: both e-mails sent
    assert rec.halt_reason == "side_effect_unknown"  # 202 with an empty id: not receipted
    assert [re.sub(r"^step \d+: ", "", u) for u in rec.unreceipted] == [
        'email_customer({"customer": "C-17", "text": "your refund"}) -> 202 with an empty id'
    ] * 2


def test_a_different_refund_is_not_a_repeat(tmp_path: Path, shop: str) -> None:
    replies = [call("refund", customer="C-17", cents=500),
               call("refund", customer="C-18", cents=500),
               {"answer": "refunds rf_1 and rf_2"}]  # fmt: skip
    result = run(tmp_path, "agent_loop", shop, replies)
    assert result.exit_code == 0, result.output
    assert len(ledger(tmp_path)) == 2


def test_the_readme_s_contract_table_is_the_code_s() -> None:
    from fsm_agent.runtime.contract import RULES

    readme = (MACHINES.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- contract-table -->", 1)[1].split("<!-- /contract-table -->")[0]
    rows = re.findall(r"^\| `(\w+)` \|.*\| `(\w+)` \|$", block, re.M)
    assert dict(rows) == {rule: reason.value for rule, reason in RULES.items()}
