"""What `fsm-agent check` costs: the shipped machines, then growing budgets, states and user
guards, each with the configurations, transitions and units of work it took (the work
`--max-work` limits), against baselines measured in the same run (a cold load of the
declaration, and `fsm-agent lint`'s structural rules on it); then how soon a machine too
large for the default limit is refused.

    python -m tests.bench.check            # medians of 5 rounds
    python -m tests.bench.check --rounds 1 # one round (seconds)
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from fsm_agent.checking.checker import CheckReport, check_machine
from fsm_agent.checking.explore import TooLarge
from fsm_agent.checking.limits import DEFAULT_LIMIT
from fsm_agent.declaration.lint import lint
from fsm_agent.declaration.load import _VALID, load_machine, parse_machine
from fsm_agent.declaration.policy import default_policy_path, load_policy
from fsm_agent.declaration.spec import MachineSpec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("agent_loop", str(ROOT / "examples" / "payments_retry" / "payments.yaml"))
#: the rows measure what a check costs, not where the default limit stops it
UNLIMITED = 100_000_000
CANONICAL = ROOT / "fsm_agent" / "machines" / "agent_loop.yaml"
#: the canonical machine's grounded answer edge, after which `user_guarded` adds its edges
_GROUNDED = (
    "  - {trigger: answer, source: drafting, dest: done, guards: [answer_grounded,"
    " judge_agrees], halt: completed}\n"
)


def median_s(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def cold_load(spec: MachineSpec) -> None:
    _VALID.clear()  # the parsed-declaration cache: a cold load parses again
    parse_machine(spec.text, source=spec.source, home=Path(spec.source).parent)


def staged(k: int) -> MachineSpec:
    """The agent loop with `k` tool stages in a row (2k + 4 states): a stage's complete
    receipts move on to the next tool, anything less back to drafting."""
    edges = [
        "{trigger: tool_call, source: drafting, dest: handoff, guards: [not tool_allowed],"
        " halt: tool_refused}",
        "{trigger: tool_call, source: drafting, dest: handoff, guards: [not privileged_cleared],"
        " halt: halt_path_refused}",
        "{trigger: tool_call, source: drafting, dest: tool_1}",
        "{trigger: answer, source: drafting, dest: drafting, guards: [retries_left], retry: true}",
        "{trigger: answer, source: drafting, dest: handoff, halt: schema_fail}",
        "{trigger: handoff, source: drafting, dest: handoff, halt: handoff_requested}",
        "{trigger: rejected, source: drafting, dest: drafting, guards: [retries_left],"
        " retry: true}",
        "{trigger: rejected, source: drafting, dest: handoff, halt: schema_fail}",
    ]
    states = ["  drafting: {action: model}"]
    for i in range(1, k + 1):
        states += [f"  tool_{i}: {{action: tool}}", f"  receipts_{i}: {{action: receipts}}"]
        after = (
            f"{{trigger: collected, source: receipts_{i}, dest: done,"
            " guards: [goal_satisfied], halt: completed}"
            if i == k
            else f"{{trigger: collected, source: receipts_{i}, dest: tool_{i + 1},"
            " guards: [receipts_complete, privileged_cleared]}"
        )
        edges += [
            f"{{trigger: tool_returned, source: tool_{i}, dest: receipts_{i}}}",
            f"{{trigger: tool_failed, source: tool_{i}, dest: drafting,"
            " guards: [error_retryable, retries_left], retry: true}",
            f"{{trigger: tool_failed, source: tool_{i}, dest: handoff, halt: tool_error}}",
            f"{{trigger: tool_timed_out, source: tool_{i}, dest: budget_exhausted,"
            " halt: tool_timeout}",
            after,
            f"{{trigger: collected, source: receipts_{i}, dest: drafting}}",
        ]
    states += ["  done: {terminal: true}", "  budget_exhausted: {terminal: true}",
               "  handoff: {terminal: true}"]  # fmt: skip
    text = (
        f"name: staged_{k}\ninitial: drafting\n"
        "budgets: {max_steps: 8, wall_clock_ms: 15000, max_cost: 1.0, tool_timeout_ms: 5000,"
        " max_retries: 2}\n"
        "states:\n" + "\n".join(states) + "\ntransitions:\n"
        + "\n".join(f"  - {e}" for e in edges) + "\n"
    )  # fmt: skip
    return parse_machine(text, source=f"<staged {k}>")


def user_guarded(k: int) -> MachineSpec:
    """The agent loop with `k` more answer edges into `done`, each guarded by its own user
    guard and then `answer_grounded`: on an ungrounded answer every one of them fails
    whatever its user guard says (2^k valuations, one decision)."""
    text = CANONICAL.read_text(encoding="utf-8")
    assert _GROUNDED in text, "the canonical machine's grounded answer edge moved"
    edges = "".join(
        f"  - {{trigger: answer, source: drafting, dest: done,"
        f" guards: [tests.bench.free_guards:g{i}, answer_grounded], halt: completed}}\n"
        for i in range(k)
    )
    text = text.replace("name: agent_loop", f"name: user_guards_{k}")
    return parse_machine(text.replace(_GROUNDED, _GROUNDED + edges), source=f"<user guards {k}>")


def row(label: str, spec: MachineSpec, rounds: int, base: float, **budgets: int) -> None:
    """One machine's check (no growth formula), past the default limit if need be."""

    def checked() -> CheckReport:
        return check_machine(spec, budgets=budgets or None, growth=False, limit=UNLIMITED)

    report = checked()
    took = median_s(checked, rounds)
    refuted = [v.name for v in report.verdicts if not v.proven]
    verdict = "proven" if not refuted else f"refuted: {', '.join(refuted)}"
    print(
        f"{label:<34} {len(spec.states):>6} {report.configurations:>8} {report.transitions:>9}"
        f" {report.work:>9} {took * 1000:>9.1f} {took / base:>8.1f}x  {verdict}"
    )


def refusal(spec: MachineSpec, rounds: int, base: float, **budgets: int) -> None:
    """How long `check` takes to refuse `spec` under `budgets` at the default limit."""

    def refused() -> None:
        try:
            check_machine(spec, budgets=budgets)
        except TooLarge:
            return
        raise AssertionError(f"{spec.name} {budgets} was not refused")

    took = median_s(refused, rounds)
    shown = ", ".join(f"{k} {v}" for k, v in budgets.items())
    print(
        f"{spec.name} ({shown}): refused past {DEFAULT_LIMIT:,} units of work in"
        f" {took * 1000:.0f} ms ({took / base:.1f}x), Python's start not included"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    policy = load_policy(default_policy_path())
    canonical = load_machine("agent_loop")
    load_s = median_s(lambda: cold_load(canonical), rounds)
    lint_s = median_s(lambda: lint(canonical, policy), rounds)
    print(f"baselines (agent_loop): cold load {load_s * 1000:.1f} ms, lint {lint_s * 1000:.2f} ms")
    print("ratio: check time / cold load of agent_loop\n")
    print(
        f"{'machine / budgets':<34} {'states':>6} {'configs':>8} {'steps':>9} {'work':>9}"
        f" {'ms':>9} {'ratio':>9}"
    )
    for ref in SHIPPED:
        spec = load_machine(ref)
        row(spec.name + " (declared)", spec, rounds, load_s)
        full = median_s(functools.partial(check_machine, spec), rounds)
        print(f"{'':<34} the full check, with the growth formula: {full * 1000:.1f} ms")
    print()
    for steps in (8, 16, 32, 64):
        for retries in (2, 4, 8):
            row(f"agent_loop max_steps {steps} max_retries {retries}", canonical, rounds, load_s,
                max_steps=steps, max_retries=retries)  # fmt: skip
    print()
    for k in (1, 2, 4, 8, 16):
        row(f"staged_{k}", staged(k), rounds, load_s)
    print()
    for k in (0, 2, 4, 8, 16, 32, 64):
        row(f"agent_loop + {k} user-guarded edges", user_guarded(k), rounds, load_s)
    print()
    refusal(canonical, rounds, load_s, max_steps=1000)


if __name__ == "__main__":
    main()
