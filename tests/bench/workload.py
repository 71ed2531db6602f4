"""The one workload every case runs, and the scratch directory their journals live in.

The agent loop at N transitions: drafting → tool_pending → awaiting_receipts → drafting …
→ done. Each step is one model call (it proposes a tool call), one tool call and one
receipts check: three transitions. The stub model and tool return at once; the tool's
result carries no receipt until the last step, whose receipted result carries the goal
(`final`), so the run halts `completed` in `done`. Every journaling case writes the same
number of events: the run's `started` event plus one per transition.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOL = "lookup"
FINAL = "found"
TRANSITIONS_PER_STEP = 3
STATES = ("drafting", "tool_pending", "awaiting_receipts", "done")

#: One transition of the loop: (step, source, dest, trigger).
Hop = tuple[int, str, str, str]


@dataclass(frozen=True)
class Workload:
    """The agent loop run for `steps` model calls."""

    steps: int

    @classmethod
    def of(cls, transitions: int) -> Workload:
        """The loop with at least `transitions` transitions (whole steps of three)."""
        return cls(max(1, math.ceil(transitions / TRANSITIONS_PER_STEP)))

    @property
    def transitions(self) -> int:
        return TRANSITIONS_PER_STEP * self.steps

    @property
    def events(self) -> int:
        """Journal rows of one run: `started` plus one per transition."""
        return self.transitions + 1

    def path(self) -> Iterator[Hop]:
        """Every transition of one run, in order."""
        for step in range(1, self.steps + 1):
            yield step, "drafting", "tool_pending", "tool_call"
            yield step, "tool_pending", "awaiting_receipts", "tool_returned"
            last = "done" if step == self.steps else "drafting"
            yield step, "awaiting_receipts", last, "collected"

    def reply(self, step: int) -> dict[str, Any]:
        """What the stub model answers on `step`: a tool call."""
        return {"tool_call": {"name": TOOL, "args": {"step": step}}}

    def result(self, step: int) -> dict[str, Any]:
        """What the stub tool returns on `step`; the last one is receipted and final."""
        last = step >= self.steps
        return {
            "receipts": [{"status": 200, "id": f"rcpt-{step}"}] if last else [],
            "observation": {"row": step},
            "final": FINAL if last else None,
        }


def goal_reached(result: dict[str, Any]) -> bool:
    """Complete receipts (2xx, non-empty id) and the goal value: the loop may halt."""
    receipts = result["receipts"]
    complete = bool(receipts) and all(200 <= r["status"] < 300 and r["id"] for r in receipts)
    return complete and bool(result["final"])


def event_body(run_id: str, seq: int, hop: Hop | None) -> str:
    """The ~300-byte JSON event the floor and the naive runtime journal per transition."""
    step, source, dest, trigger = hop if hop is not None else (0, None, "drafting", None)
    return json.dumps(
        {
            "run_id": run_id,
            "seq": seq,
            "source": source,
            "dest": dest,
            "trigger": trigger,
            "guards": [{"guard": "tool_allowed", "result": True}],
            "meters": {"steps_used": step, "tool_calls": step, "retries_used": 0, "cost": 0.0},
            "budgets": {"max_steps": 8, "wall_clock_ms": 15000, "max_cost": 1.0},
            "wall_time": "2026-01-01T00:00:00.000+00:00",
        },
        separators=(",", ":"),
    )


class Scratch:
    """A directory for the journals of one benchmark run: a fresh file name per use."""

    def __init__(self, parent: str | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="fsm-agent-bench-", dir=parent))
        self._count = itertools.count(1)

    def fresh(self, name: str) -> Path:
        """A path nothing has used yet (the file does not exist)."""
        return self.root / f"{next(self._count):05d}-{name}"

    def discard(self, *paths: Path) -> None:
        """Remove files and their SQLite sidecars (-wal, -shm)."""
        for path in paths:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def filesystem_of(path: Path) -> str:
    """The filesystem type `path` lives on (from /proc/mounts), or "unknown"."""
    try:
        mounts = Path("/proc/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return "unknown"
    best, kind = "", "unknown"
    resolved = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1]
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind
