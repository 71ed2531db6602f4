"""User guards for generated machines (the benchmark's and the tests'): every
`tests.bench.free_guards:g<N>` is a guard, so a declaration can name as many distinct ones
as it likes. `fsm-agent check` takes each as a free boolean; a real run finds each one
approving."""

from __future__ import annotations

from collections.abc import Callable

from fsm_agent import Snapshot


def approves(snapshot: Snapshot) -> bool:
    return True


def __getattr__(name: str) -> Callable[[Snapshot], bool]:
    if name.startswith("g") and name[1:].isdigit():
        return approves
    raise AttributeError(name)
