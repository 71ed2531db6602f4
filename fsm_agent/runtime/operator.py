"""Operators' controls on live runs, read from the store before each model call.

Only a person acts here, through the CLI (`raise-budget`, `freeze-routing`,
`unfreeze-routing`, `pause`): the act waits in the store, the run applies it before its next model
call, and journals it as an `operator` event (who, why, what changed), so replay shows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from fsm_agent.adapters.models import model_lane
from fsm_agent.errors import InvalidInputError, RunPaused
from fsm_agent.journal.store import Control
from fsm_agent.runtime.budgets import make_budgets
from fsm_agent.runtime.journaling import Journaling

if TYPE_CHECKING:
    from fsm_agent.runtime.context import RunContext


class RoutingFrozen(Exception):
    """Raised inside the worker when an operator's freeze forbids the next model call."""


class OperatorControls(Journaling):
    """The worker's side of operator controls (mixed into the worker)."""

    ctx: RunContext
    control_seen: int
    frozen_by: Control | None
    #: the store's control version when its controls were last read (None: not known)
    control_version: object | None = None

    def _apply_controls(self, action: str) -> None:
        """Apply operators' instructions queued in the store, each journaled as an act; then
        refuse the model call if routing is frozen and the model is not on a local lane."""
        for control in self._new_controls():
            self.control_seen = control.id
            if control.kind == "raise_budget":
                self._raise_budget(control, action)
            elif control.kind == "pause":
                self._pause(control, action)
            else:
                self.frozen_by = control if control.kind == "freeze_routing" else None
                verb = "frozen" if self.frozen_by else "unfrozen"
                note = f"routing {verb} by {control.who}: {control.why}"
                snap = self.ctx.snapshot(self.state, None, action)
                self._commit(
                    self._event(
                        control.kind, self.state, snap, kind="operator", note=note,
                        control=control.id,
                    )
                )  # fmt: skip
        lane = model_lane(self.ctx.model)
        local = lane is not None and lane.kind == "local_fn" and lane.tier != "free"
        if self.frozen_by is not None and not local:
            by = self.frozen_by
            raise RoutingFrozen(
                f"routing frozen by {by.who} ({by.why}); the model's lane"
                f" {lane or 'undeclared'} is not a local function: no call was made"
            )

    def _new_controls(self) -> list[Control]:
        """The controls queued since the last one applied; read only when the store says one
        may have been added since the last read (a store that cannot say is read each time)."""
        version_of = getattr(self.store, "control_version", None)
        version = version_of() if version_of is not None else None
        if version is not None and version == self.control_version:
            return []
        controls = self.store.controls(self.run_id, after=self.control_seen)
        self.control_version = version  # taken before the read: a later add changes it
        return controls

    def _catch_up_routing(self, upto: int | None = None) -> None:
        """Routing frozen before this run started applies to it too (not journaled as its act).
        A resumed run catches up only `upto` the controls it had already taken into account."""
        for control in self.store.controls(self.run_id, after=0):
            if upto is not None and control.id > upto:
                break
            self.control_seen = max(self.control_seen, control.id)
            if control.kind in ("freeze_routing", "unfreeze_routing"):
                self.frozen_by = control if control.kind == "freeze_routing" else None

    def _raise_budget(self, control: Control, action: str) -> None:
        """Apply a raise-budget act (re-validated: a lowering is refused), journaled."""
        before = self.ctx.budgets
        try:
            raised = make_budgets(attrs.asdict(before), control.payload)
            lowered = [n for n in control.payload if getattr(raised, n) < getattr(before, n)]
            if lowered:
                raise InvalidInputError(f"{', '.join(lowered)} would be lowered, not raised")
        except InvalidInputError as exc:  # fail closed: the budgets stay as they were
            note = f"raise-budget by {control.who} refused: {exc}"
        else:
            self.ctx.budgets = raised
            changes = ", ".join(
                f"{n} {getattr(before, n)} -> {getattr(raised, n)}" for n in control.payload
            )
            note = f"raise-budget by {control.who}: {changes}; why: {control.why}"
        snap = self.ctx.snapshot(self.state, None, action)
        self._commit(
            self._event(
                "raise_budget", self.state, snap, kind="operator", note=note, control=control.id
            )
        )

    def _pause(self, control: Control, action: str) -> None:
        """Journal the pause, then stop this process: the run waits for `resume`."""
        snap = self.ctx.snapshot(self.state, None, action)
        note = f"paused by {control.who}: {control.why}"
        event = self._event("pause", self.state, snap, kind="operator", note=note,
                            control=control.id)  # fmt: skip
        self._commit(event)
        raise RunPaused(self.run_id, step=self.ctx.steps_used, by=control.who, why=control.why)
