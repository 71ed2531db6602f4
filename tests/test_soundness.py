"""`check` is sound over the class of declarations: thousands of mutants of the shipped
machines (guards dropped, swapped between edges, negated; edges reordered within their
source and trigger; edges added; user guards; a user action returning outcomes beyond its
declared ones, declared with or without an edge; budgets at their bounds), each checked and
then driven through real runs on SQLite (scripted replies, tools that complete, stay
pending, fail or raise, a privileged tool, a non-local halt lane) and through `simulate`.
Whenever a run violates a property, `check` must not have said `proven` for it:

- `halts`: a run ends for a named reason, and not by the wall clock or the money cap (the
  only things that end a loop the step and retry budgets do not);
- `no-gap`: no run halts `no_transition`;
- `receipts`: no run halts `completed` with a side effect lacking receipts or on an answer
  no receipt grounds (`simulate`'s `receipts` invariant alike);
- `privileged`: no privileged tool runs under a halt lane the local check refuses, and no
  run takes more retry edges than its retry budget.

`dead` is not a safety property: no run can violate it. The figures are printed (`-s`) and
carried in the assertion message."""

from __future__ import annotations

import copy
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from fsm_agent import Receipt, ScriptedModel, Tool, ToolError, ToolRegistry, ToolResult, run
from fsm_agent.checking.checker import check_machine
from fsm_agent.checking.explore import TooLarge
from fsm_agent.declaration.load import parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import HaltPathRefused, MachineSpecError
from fsm_agent.examples.payments_retry.tools import Gateway
from fsm_agent.halt import HaltReason
from fsm_agent.runtime.grounding import ground
from fsm_agent.runtime.lanes import LOCAL, Lane
from fsm_agent.runtime.proposals import FinalAnswer
from fsm_agent.simulation.session import simulate
from fsm_agent.stores.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parent.parent
AGENT_LOOP = ROOT / "fsm_agent" / "machines" / "agent_loop.yaml"
PAYMENTS = ROOT / "fsm_agent" / "examples" / "payments_retry" / "payments.yaml"
SHIPPED = {
    "agent_loop": yaml.safe_load(AGENT_LOOP.read_text("utf-8")),
    "payments": yaml.safe_load(PAYMENTS.read_text("utf-8")),
}
SAFETY = ("halts", "no-gap", "receipts", "privileged")
TRUE, FALSE = "tests.fixture_guards:always_true", "tests.fixture_guards:always_false"
USER_GUARDS = (TRUE, FALSE, f"not {TRUE}", f"not {FALSE}")
EXTRAS = "tests.fixture_soundness:webhook_with_extras"
#: a halt lane the local check refuses: a privileged tool must never run under it
REMOTE = Lane(kind="http", tier="paid")
#: a real run's clock budgets: a loop only the wall clock ends must end fast (`check` does
#: not read them; `simulate` keeps the declared ones, on its virtual clock)
FAST = {"wall_clock_ms": 300, "tool_timeout_ms": 200}
#: the halts that end a loop the step and retry budgets do not
UNBOUNDED = {HaltReason.WALL_CLOCK, HaltReason.COST_CAP}


def _edge(trigger: str, source: str, dest: str, halt: str = "", retry: bool = False) -> Any:
    edge: dict[str, Any] = {"trigger": trigger, "source": source, "dest": dest}
    if halt:
        edge["halt"] = halt
    if retry:
        edge["retry"] = True
    return edge


#: edges a mutant may gain, per machine (any may go anywhere in the list)
COMMON = [
    _edge("tool_call", "drafting", "tool_pending"),
    _edge("tool_failed", "tool_pending", "drafting"),
    _edge("tool_failed", "tool_pending", "drafting", retry=True),
    _edge("rejected", "drafting", "drafting", retry=True),
    _edge("answer", "drafting", "drafting", retry=True),
    _edge("collected", "awaiting_receipts", "tool_pending"),
    _edge("collected", "awaiting_receipts", "done", "completed"),
    _edge("tool_returned", "tool_pending", "drafting"),
]
ADDED: dict[str, list[dict[str, Any]]] = {
    "agent_loop": [
        *COMMON,
        _edge("answer", "drafting", "done", "completed"),
        _edge("tool_returned", "tool_pending", "done", "completed"),
    ],
    "payments": [
        *COMMON,
        _edge("webhook_received", "awaiting_webhook", "done", "completed"),
        _edge("no_webhook", "awaiting_webhook", "awaiting_webhook"),
        _edge("failed", "awaiting_webhook", "drafting"),
    ],
}


def _guarded(edges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in edges if e.get("guards")]


def _set_guards(edge: dict[str, Any], guards: list[str]) -> None:
    if guards:
        edge["guards"] = guards
    else:
        edge.pop("guards", None)


def _mutate(rng: random.Random, machine: str, d: dict[str, Any]) -> str:
    """One mutation of `d` (in place); its name."""
    edges: list[dict[str, Any]] = d["transitions"]
    op = rng.choice(("drop", "swap", "negate", "reorder", "add", "user", "outcome"))
    if op == "drop" and _guarded(edges):
        e = rng.choice(_guarded(edges))
        guards = list(e["guards"])
        guards.pop(rng.randrange(len(guards)))
        _set_guards(e, guards)
    elif op == "swap":
        a, b = rng.sample(edges, 2)
        ga, gb = list(a.get("guards", [])), list(b.get("guards", []))
        _set_guards(a, gb)
        _set_guards(b, ga)
    elif op == "negate" and _guarded(edges):
        e = rng.choice(_guarded(edges))
        guards = list(e["guards"])
        i = rng.randrange(len(guards))
        g = guards[i]
        guards[i] = g.removeprefix("not ") if g.startswith("not ") else f"not {g}"
        e["guards"] = guards
    elif op == "reorder":
        groups: dict[tuple[str, str], list[int]] = {}
        for i, e in enumerate(edges):
            groups.setdefault((e["source"], e["trigger"]), []).append(i)
        many = [g for g in groups.values() if len(g) > 1]
        i, j = rng.sample(rng.choice(many), 2)
        edges[i], edges[j] = edges[j], edges[i]
    elif op == "add":
        edge = copy.deepcopy(rng.choice(ADDED[machine]))
        if rng.random() < 0.5:
            edge["guards"] = [rng.choice((*USER_GUARDS, "goal_satisfied", "retries_left"))]
        edges.insert(rng.randrange(len(edges) + 1), edge)
    elif op == "user":
        e = rng.choice(edges)
        guards = list(e.get("guards", []))
        if guards and rng.random() < 0.5:
            guards[rng.randrange(len(guards))] = rng.choice(USER_GUARDS)
        else:
            guards.insert(rng.randrange(len(guards) + 1), rng.choice(USER_GUARDS))
        e["guards"] = guards
    elif op == "outcome" and machine == "payments":
        state = d["states"]["awaiting_webhook"]
        state["action"] = EXTRAS
        if rng.random() < 0.8:
            state["outcomes"] = [*state["outcomes"], "late_webhook"]
        dest = rng.choice((None, "drafting", "done", "handoff"))
        if dest is not None:
            edge = _edge("late_webhook", "awaiting_webhook", dest)
            if dest == "done":
                edge["halt"] = "completed"
                if rng.random() < 0.5:
                    edge["guards"] = ["goal_satisfied"]
            elif dest == "handoff":
                edge["halt"] = "handoff_requested"
            edges.insert(rng.randrange(len(edges) + 1), edge)
    else:
        return "none"
    return op


def mutant(seed: int) -> tuple[str, str, Counter[str]]:
    """Mutant `seed`: its machine, its YAML text and the mutations it is made of. Budgets
    are always at or near their bounds (from one step and no retry)."""
    rng = random.Random(f"soundness:{seed}")  # noqa: S311 - a test
    machine = rng.choice(("agent_loop", "payments"))
    d = copy.deepcopy(SHIPPED[machine])
    ops = Counter(_mutate(rng, machine, d) for _ in range(rng.randint(1, 4)))
    d["budgets"].update(max_steps=rng.randint(1, 4), max_retries=rng.randint(0, 2))
    d["thrash_limit"] = rng.choice((0, 0, 1, 2))
    if machine == "agent_loop":
        d["tools"] = ["lookup", "pay", "note", "wire"]
    return machine, yaml.safe_dump(d, sort_keys=False), ops


def agent_tools(calls: list[str], behaviour: list[str]) -> ToolRegistry:
    """The agent loop's tools (`wire` privileged), results following `behaviour`."""
    modes = iter(behaviour * 20)

    def result(name: str) -> ToolResult:
        calls.append(name)
        mode = next(modes, "complete")
        if mode == "raise":
            raise RuntimeError("connection reset after sending")  # outcome unknown
        if mode == "fail":
            raise ToolError("declined", retryable=True)
        if mode == "fatal":
            raise ToolError("refused", retryable=False)
        if mode == "partial":
            return ToolResult(receipts=(Receipt(status=206, id=""),), observation="pending")
        return ToolResult(receipts=(Receipt(status=201, id=f"id-{len(calls)}"),),
                          observation={"value": f"v-{len(calls)}"},
                          final=f"v-{len(calls)}" if mode == "complete" else None)  # fmt: skip

    def lookup(q: str = "") -> ToolResult:
        return result("lookup")

    def pay(cents: int = 0) -> ToolResult:
        return result("pay")

    def note(text: str = "") -> ToolResult:
        return result("note")

    def wire(cents: int = 0) -> ToolResult:
        return result("wire")

    return ToolRegistry((
        Tool("lookup", lookup, side_effect=False),
        Tool("pay", pay),
        Tool("note", note, repeatable=True),
        Tool("wire", wire, privileged=True),
    ))  # fmt: skip


def payment_tools(calls: list[str]) -> ToolRegistry:
    """The sandbox gateway's privileged, idempotent capture, its calls counted."""
    gateway = Gateway()

    def capture_payment(order_id: str, amount_cents: int, idempotency_key: str) -> ToolResult:
        calls.append("capture_payment")
        return gateway.capture(order_id, amount_cents, idempotency_key)

    return ToolRegistry((Tool("capture_payment", capture_payment, privileged=True,
                               idempotent=True),))  # fmt: skip


def _script(rng: random.Random, machine: str) -> list[Any]:
    if machine == "agent_loop":
        calls: list[Any] = [
            {"tool_call": {"name": n, "args": a}}
            for n in ("lookup", "pay", "note", "wire", "nope")
            for a in ({}, {"cents": 5}, {"q": "x"})
        ]
        other: list[Any] = [{"answer": v} for v in ("v-1", "v-2", "99999", "done")]
    else:
        order = rng.choice(("ord_1001", "ord_2002", "ord_9"))
        args = {"order_id": order, "amount_cents": 500, "idempotency_key": "k1"}
        calls = [{"tool_call": {"name": "capture_payment", "args": args}}]
        other = [{"answer": "cap_1"}, {"answer": "done"}]
    pool = calls * 3 + [*other, "prose", ""]
    return [rng.choice(pool) for _ in range(rng.randint(0, 6))]


@attrs.define
class Tally:
    """What the soundness drive saw."""

    generated: int = 0
    rejected: int = 0
    loaded: int = 0
    checked: int = 0
    too_large: int = 0
    runs: int = 0
    simulated: int = 0
    refuted: Counter[str] = attrs.field(factory=Counter)
    violations: Counter[str] = attrs.field(factory=Counter)
    ops: Counter[str] = attrs.field(factory=Counter)
    unsound: list[tuple[str, str, str]] = attrs.field(factory=list)
    raised: list[tuple[str, str]] = attrs.field(factory=list)

    def line(self, seconds: float) -> str:
        return (
            f"soundness: {self.generated} generated machines, {self.rejected} rejected by the"
            f" loader, {self.loaded} loaded, {self.checked} checked ({self.too_large} too large"
            f" to check), {self.runs} real runs and {self.simulated} simulated runs driven,"
            f" refuted by check: {dict(sorted(self.refuted.items()))}, violations seen:"
            f" { {p: self.violations[p] for p in SAFETY} }, {len(self.unsound)} unsound"
            f" verdicts, {len(self.raised)} runs that raised; mutations:"
            f" {dict(sorted(self.ops.items()))}; {seconds:.1f} s"
        )


def real_run(
    spec: MachineSpec, machine: str, rng: random.Random, db: Path, remote: bool, longest: int
) -> tuple[set[str], str]:
    """One real run of `spec`: the properties it violated, and what happened. A run the
    wall clock ended breaks `halts` only past `longest`, the most transitions `check`
    allows (-1: no bound; a slow machine may end a short run by the clock)."""
    calls: list[str] = []
    behaviour = [rng.choice(("complete", "partial", "raise", "fail", "fatal", "bare"))
                 for _ in range(rng.randint(0, 4))]  # fmt: skip
    tools = agent_tools(calls, behaviour) if machine == "agent_loop" else payment_tools(calls)
    privileged = {"wire", "capture_payment"}
    script = _script(rng, machine)
    what = f"script={json.dumps(script)} behaviour={behaviour} remote={remote}"
    bad: set[str] = set()
    try:
        record = run(spec, task="t", model=ScriptedModel(script), tools=tools, store=db,
                     handle_signals=False, halt_lane=REMOTE if remote else LOCAL,
                     budgets=FAST)  # fmt: skip
    except HaltPathRefused:
        if remote and any(c in privileged for c in calls):
            bad.add("privileged")
        return bad, what + " -> refused: HaltPathRefused"
    what += f" -> {record.halt_reason} calls={calls}"
    if remote and any(c in privileged for c in calls):
        bad.add("privileged")
    if record.halt_reason is HaltReason.NO_TRANSITION:
        bad.add("no-gap")
    store = SqliteStore(db)
    try:
        events = store.events(record.run_id)
    finally:
        store.close()
    moves = sum(e.kind == "transition" for e in events)
    if record.halt_reason in UNBOUNDED and (longest < 0 or moves > longest):
        bad.add("halts")
    if sum(e.retry for e in events) > spec.budgets.get("max_retries", 2):
        bad.add("privileged")
    if record.halt_reason is HaltReason.COMPLETED:
        last = events[-1].snapshot
        if record.unreceipted:
            bad.add("receipts")
        if (
            isinstance(last.proposal, FinalAnswer)
            and not ground(last.proposal.text, last.receipted).grounded
        ):
            bad.add("receipts")
    return bad, what


def simulated(spec: MachineSpec, machine: str, seed: int, runs: int, out: Path) -> set[str]:
    """The properties some of `runs` simulated runs of `spec` violated."""
    tools = agent_tools([], []) if machine == "agent_loop" else payment_tools([])
    summary = simulate(spec, tools, runs=runs, seed=seed, crash=None, out_dir=str(out))
    bad: set[str] = set()
    if any(h in UNBOUNDED for h in summary.halts):  # a StrEnum: its values compare equal
        bad.add("halts")
    if summary.halts.get("no_transition"):
        bad.add("no-gap")
    if summary.violations["receipts"]:
        bad.add("receipts")
    return bad


def drive(seeds: range, real: int, sim: int, tmp: Path) -> Tally:
    """Generate the mutants of `seeds`, check each and drive `real` real runs and `sim`
    simulated runs of each."""
    tally = Tally()
    for seed in seeds:
        machine, text, ops = mutant(seed)
        tally.generated += 1
        tally.ops.update(ops)
        home = PAYMENTS.parent if machine == "payments" else AGENT_LOOP.parent
        source = str(home / f"mutant-{seed}.yaml")
        try:
            spec = parse_machine(text, source=source, home=home)
        except MachineSpecError:
            tally.rejected += 1
            continue
        tally.loaded += 1
        longest = -1
        try:
            report = check_machine(spec, growth=False)
        except TooLarge:
            tally.too_large += 1
            verdicts = {}
        else:
            verdicts = {v.name: v.proven for v in report.verdicts}
            bound = report.verdicts[0].longest
            longest = bound[0] if bound is not None else -1
            tally.checked += 1
            tally.refuted.update(name for name, proven in verdicts.items() if not proven)
        rng = random.Random(f"runs:{seed}")  # noqa: S311 - a test
        found: list[tuple[set[str], str]] = []
        for _ in range(real):
            try:
                remote = rng.random() < 0.2
                found.append(real_run(spec, machine, rng, tmp / "runs.db", remote, longest))
            except Exception as exc:  # the runtime raised instead of halting: a bug
                tally.raised.append((text, f"{type(exc).__name__}: {exc}"))
            tally.runs += 1
        # only where `check` proved `halts`: on the virtual clock a loop that spends no step
        # and no time (a user action's outcome back to its own state) never ends
        if sim and verdicts.get("halts"):
            out = tmp / f"sim-{seed}"
            found.append((simulated(spec, machine, seed, sim, out), f"simulate seed={seed}"))
            tally.simulated += sim
        for bad, what in found:
            tally.violations.update(bad)
            tally.unsound += [(p, text, what) for p in sorted(bad) if verdicts.get(p)]
    return tally


def _assert_sound(tally: Tally, began: float) -> None:
    line = tally.line(time.perf_counter() - began)
    print(f"\n{line}")
    assert tally.unsound == [], (line, tally.unsound[:3])
    assert tally.raised == [], (line, tally.raised[:3])
    assert tally.checked > tally.generated // 2, line
    assert tally.rejected > 0, line  # the loader refuses some mutants: it does its job


def test_check_is_sound_over_mutants(tmp_path: Path) -> None:
    began = time.perf_counter()
    _assert_sound(drive(range(150), real=3, sim=1, tmp=tmp_path), began)


@pytest.mark.slow
def test_check_is_sound_over_thousands_of_mutants(tmp_path: Path) -> None:
    began = time.perf_counter()
    _assert_sound(drive(range(1000, 3500), real=2, sim=1, tmp=tmp_path), began)
