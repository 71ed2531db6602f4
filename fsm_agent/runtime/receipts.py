"""Receipts: the only evidence that a side effect happened (HTTP status + resource id)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs


@attrs.frozen
class Receipt:
    """What a tool adapter reports for one side effect. Prose is never a receipt."""

    status: int
    id: str
    idempotency_key: str | None = None
    checksum: str | None = None


def finite_cost(instance: Any, attribute: Any, value: Any) -> None:
    """attrs validator: a reported cost is a finite number of dollars >= 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


def receipt_ok(receipt: Receipt) -> bool:
    """A 2xx integer status and a non-empty resource id."""
    status: Any = receipt.status
    return (
        isinstance(status, int)
        and not isinstance(status, bool)
        and 200 <= status < 300
        and isinstance(receipt.id, str)
        and len(receipt.id) > 0
    )


def receipts_complete(receipts: Sequence[Receipt]) -> bool:
    """Non-empty, and every receipt is ok. A 206 with an empty id is not complete."""
    return len(receipts) > 0 and all(receipt_ok(r) for r in receipts)
