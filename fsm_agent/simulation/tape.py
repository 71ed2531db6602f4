"""The choices a simulated run is made of: a tape of small integers.

Every draw of a run (which reply the model gives, which result a tool returns, where the
process crashes) is one `choose(n)`: an integer in [0, n), 0 being the simplest option.
A run is a pure function of its tape, so a failing run is reproduced by its tape alone and
shrunk by shortening it or lowering its entries (`fsm_agent.simulation.shrink`). Past the
end of a fixed tape every choice is 0.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class Tape:
    """A run's choices: drawn from `rng` and recorded, or read from `fixed` (then 0 past
    its end, and an entry too large for its draw is taken modulo the draw's size)."""

    def __init__(self, rng: random.Random | None = None, fixed: Sequence[int] = ()) -> None:
        self._rng = rng
        self._fixed = tuple(fixed)
        self.used: list[int] = []

    @classmethod
    def seeded(cls, seed: int) -> Tape:
        return cls(rng=random.Random(seed))  # noqa: S311 - a simulation, not a secret

    def choose(self, n: int) -> int:
        """An integer in [0, n)."""
        if n <= 1:
            value = 0
        elif self._rng is not None:
            value = self._rng.randrange(n)
        else:
            i = len(self.used)
            value = self._fixed[i] % n if i < len(self._fixed) else 0
        self.used.append(value)
        return value

    def weighted(self, weights: Sequence[int]) -> int:
        """An index into `weights`, drawn in proportion to them (index 0 is the simplest).
        One choice on the tape: the position in the weights' total, mapped to its index."""
        point = self.choose(sum(weights))
        for index, weight in enumerate(weights):
            if point < weight:
                return index
            point -= weight
        return len(weights) - 1  # unreachable: point < sum(weights)
