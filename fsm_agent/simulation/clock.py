"""The virtual clock of a simulated run: time moves only when the simulation moves it.

A run is given the clock as its `clock` (`fsm_agent.run`): its meters, its calls' latencies
and their deadlines (`fsm_agent.runtime.deadline.Call.clock`) are all read from it, so a
simulated model that "takes" 800 ms or a tool that "hangs" past its timeout costs no real
time. The journal's wall times are made from it too (`wall_iso`, by `SimStore`).
"""

from __future__ import annotations

import datetime

#: The instant a virtual clock reading of 0 stands for in the journal's wall times.
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class VirtualClock:
    """Monotonic seconds that advance only by `advance` (whole milliseconds, so every
    reading, and every duration the runtime derives from two of them, is exact)."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        """Move the clock forward by `ms` milliseconds (>= 0)."""
        if ms < 0:
            raise ValueError(f"a clock only moves forward, not by {ms} ms")
        self.ms += ms

    def wall_iso(self) -> str:
        """The reading as a wall time, formatted as the journal's (`now_iso`)."""
        moment = EPOCH + datetime.timedelta(milliseconds=self.ms)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.ms % 1000:03d}+00:00"
