"""The scaling rows: one run of the loop at each size, each in a fresh child process.

For each size (by default 100, 1,000, 10,000 and 100,000 transitions) a child process
(`tests.bench.child`) warms up, runs the loop once to a fresh journal and reports three
rows: µs per journaled transition, peak RSS (VmHWM) and journal bytes per transition (the
file and its WAL after a checkpoint, divided by the events the run journaled). The big
sizes take seconds to a minute each, so they are measured in fewer rounds than the small
ones (`rounds_per_size`), spread evenly over the run; a ratio between two sizes pairs the
rounds in which both were measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

from tests.bench.processes import KIB, REPO_ROOT
from tests.bench.workload import Scratch, Workload

#: The sizes of a full run; the base the largest is compared with.
SIZES = (100, 1_000, 10_000, 100_000)
BASE = 1_000
#: In how many rounds a size is measured: every round up to 1,000 transitions, 5 rounds up
#: to 10,000 (~3 s each today), 3 rounds beyond (100,000 take ~30 s each today).
SMALL, MEDIUM = 1_000, 10_000
MEDIUM_ROUNDS, LARGE_ROUNDS = 5, 3
#: VmHWM of each child before its first run: the interpreter and the imports.
RSS_IMPORTS = "RSS after imports"
_CHILD_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Scale:
    """The scaling sizes, in how many rounds each is measured, and the comparison."""

    #: transitions of each scaling run, ascending
    sizes: tuple[int, ...]
    #: in how many of the rounds each size is measured (None: every round)
    times: tuple[int | None, ...]
    #: the size whose µs per transition the largest one is compared with
    base: int

    @classmethod
    def of(cls, sizes: tuple[int, ...]) -> Scale:
        """These sizes, each measured in as many rounds as its size allows (see `times_for`),
        compared with 1,000 transitions (or, without it, the next size below the largest)."""
        ordered = tuple(sorted(set(sizes)))
        if BASE in ordered and ordered[-1] > BASE:
            base = BASE
        else:
            base = ordered[-2] if len(ordered) > 1 else ordered[0]
        return cls(ordered, tuple(times_for(s) for s in ordered), base)

    @property
    def largest(self) -> int:
        return max(self.sizes)

    def in_round(self, rounds: int, index: int) -> tuple[int, ...]:
        """The sizes measured in round `index` of `rounds`."""
        pairs = zip(self.sizes, self.times, strict=True)
        return tuple(s for s, n in pairs if spread(index, rounds, n))


def times_for(size: int) -> int | None:
    """In how many rounds a run of `size` transitions is measured (None: every round)."""
    if size <= SMALL:
        return None
    return MEDIUM_ROUNDS if size <= MEDIUM else LARGE_ROUNDS


def us_metric(size: int) -> str:
    return f"{size:,} transitions"


def rss_metric(size: int) -> str:
    return f"peak RSS, {size:,} transitions"


def bytes_metric(size: int) -> str:
    return f"journal, {size:,} transitions"


def metric_names(sizes: tuple[int, ...]) -> tuple[str, ...]:
    """Every row the scaling case fills, for these sizes."""
    return (
        *(us_metric(s) for s in sizes),
        *(rss_metric(s) for s in sizes),
        *(bytes_metric(s) for s in sizes),
        RSS_IMPORTS,
    )


def spread(index: int, rounds: int, times: int | None) -> bool:
    """Whether round `index` of `rounds` is one of the `times` rounds spread evenly over
    them (None: every round)."""
    if times is None or times >= rounds:
        return True
    every = max(1, rounds // max(1, times))
    return index % every == 0 and index // every < times


def child_run(transitions: int, scratch: Scratch) -> dict[str, float]:
    """One run of `transitions` in a child process: what it printed (see `child.py`)."""
    db, record = scratch.fresh("scale.db"), scratch.fresh("scale.json")
    command = [
        sys.executable, "-m", "tests.bench.child",
        "--transitions", str(transitions), "--db", str(db), "--record", str(record),
    ]  # fmt: skip
    try:
        out = subprocess.run(
            command, cwd=REPO_ROOT, capture_output=True, text=True, check=False,
            timeout=_CHILD_TIMEOUT_S,
        )  # fmt: skip
    finally:
        scratch.discard(db, record)
    if out.returncode != 0:
        raise RuntimeError(f"the scaling child exited {out.returncode}:\n{out.stderr[-2000:]}")
    data: dict[str, float] = json.loads(out.stdout)
    return data


def measure(sizes: tuple[int, ...], scratch: Scratch) -> dict[str, list[float]]:
    """One sample of each row for each of `sizes`, smallest first."""
    samples: dict[str, list[float]] = {}
    for size in sorted(sizes):
        data = child_run(Workload.of(size).transitions, scratch)
        samples[us_metric(size)] = [data["us_per_transition"]]
        samples[rss_metric(size)] = [data["rss_peak_kib"] / KIB]
        samples[bytes_metric(size)] = [data["journal_bytes"] / data["events"]]
        samples.setdefault(RSS_IMPORTS, []).append(data["rss_import_kib"] / KIB)
    return samples
