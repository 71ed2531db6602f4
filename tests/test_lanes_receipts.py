"""Seed 000's CI tests, in Python: the halt vote never moves to a free lane, and only complete
receipts (a 2xx integer status and a non-empty resource id) count as evidence."""

from __future__ import annotations

from typing import Any

import cattrs
import pytest

from fsm_agent.errors import FsmAgentError, HaltPathRefused
from fsm_agent.journal import serde
from fsm_agent.runtime.lanes import CONTROL_KEYS, LOCAL, ControlPlane, Lane, assert_local_halt
from fsm_agent.runtime.receipts import Receipt, receipt_ok, receipts_complete

POLICY = ControlPlane()  # every control key local_only, as in the seed's policy
LOCAL_LANE = Lane(
    kind="local_fn", tier="paid"
)  # the seed's { kind: 'local_fn', tier: 'paid_local' }
FREE_LANE = Lane(kind="http", tier="free")
FREE_SERVER = Lane(kind="free_server", tier="free")


def refusal(policy: ControlPlane, key: str, lane: Lane | None) -> HaltPathRefused:
    with pytest.raises(HaltPathRefused) as info:
        assert_local_halt(policy, key, lane)
    err = info.value
    assert err.code == "HALT_PATH_REFUSED"
    assert str(err).startswith("HALT_PATH_REFUSED: ")
    assert err.decision_key == key
    assert err.lane == lane
    assert isinstance(err, FsmAgentError)
    return err


# --- the lane check ---------------------------------------------------------------------------


def test_refuses_halt_when_the_lane_is_free() -> None:
    # even with complete receipts in hand, a free lane may not own the halt vote
    assert receipts_complete([Receipt(status=200, id="cap_1")])
    err = refusal(POLICY, "halt", FREE_LANE)
    assert "free lane cannot own halt path" in str(err)


def test_refuses_halt_when_the_host_is_a_free_server() -> None:
    err = refusal(POLICY, "halt", FREE_SERVER)
    assert "free lane cannot own halt path" in str(err)
    # a free server is refused whatever tier it claims
    refusal(POLICY, "halt", Lane(kind="free_server", tier="local"))


@pytest.mark.parametrize("lane", [Lane(kind="http", tier="paid"), Lane(kind="http", tier="local")])
def test_refuses_a_lane_that_is_not_a_local_function(lane: Lane) -> None:
    err = refusal(POLICY, "halt", lane)
    assert "halt lane must be a local function" in str(err)


def test_refuses_a_local_function_on_the_free_tier() -> None:
    refusal(POLICY, "halt", Lane(kind="local_fn", tier="free"))


def test_refuses_no_lane_at_all() -> None:
    refusal(POLICY, "halt", None)


@pytest.mark.parametrize("key", sorted(CONTROL_KEYS))
@pytest.mark.parametrize("value", ["allow_free_lane", "local", "", "LOCAL_ONLY"])
def test_refuses_a_control_key_that_is_not_local_only(key: str, value: str) -> None:
    policy = ControlPlane(**{key: value})
    err = refusal(policy, key, LOCAL)
    assert "is not local_only" in str(err)


@pytest.mark.parametrize("key", sorted(CONTROL_KEYS))
@pytest.mark.parametrize("lane", [FREE_LANE, FREE_SERVER, Lane(kind="http", tier="paid"), None])
def test_every_control_key_is_refused_off_a_local_lane(key: str, lane: Lane | None) -> None:
    refusal(POLICY, key, lane)


@pytest.mark.parametrize("key", sorted(CONTROL_KEYS))
@pytest.mark.parametrize("lane", [LOCAL, LOCAL_LANE])
def test_a_local_function_owns_every_control_key(key: str, lane: Lane) -> None:
    assert assert_local_halt(POLICY, key, lane) is None


@pytest.mark.parametrize("key", ["draft", "summarize", "fixture_host"])
def test_data_plane_keys_may_use_a_free_lane(key: str) -> None:
    assert assert_local_halt(POLICY, key, FREE_LANE) is None
    assert assert_local_halt(POLICY, key, FREE_SERVER) is None


def test_control_keys_are_the_seed_three() -> None:
    assert frozenset({"halt", "retry_budget", "schema_repair_vote"}) == CONTROL_KEYS


# --- receipts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("receipts", "complete"),
    [
        ([Receipt(status=200, id="cap_1")], True),
        ((Receipt(status=201, id="r", idempotency_key="k", checksum="c"),), True),
        ([Receipt(status=200, id="a"), Receipt(status=299, id="b")], True),
        ([], False),
        ((), False),
        ([Receipt(status=200, id="")], False),  # truncated: a bare 200 is not business truth
        ([Receipt(status=206, id="")], False),  # wait for receipts, do not halt
        ([Receipt(status=200, id="a"), Receipt(status=206, id="")], False),
        ([Receipt(status=199, id="a")], False),
        ([Receipt(status=300, id="a")], False),
        ([Receipt(status=500, id="a")], False),
    ],
    ids=[
        "complete",
        "complete-with-keys",
        "all-2xx",
        "empty-list",
        "empty-tuple",
        "truncated-200-empty-id",
        "206-empty-id",
        "one-of-two-incomplete",
        "199",
        "300",
        "500",
    ],
)
def test_receipts_complete(receipts: Any, complete: bool) -> None:
    assert receipts_complete(receipts) is complete


@pytest.mark.parametrize(
    ("status", "rid"),
    [("200", "cap_1"), (True, "cap_1"), (200.0, "cap_1"), (None, "cap_1"), (200, None), (200, 7)],
    ids=["str-status", "bool-status", "float-status", "no-status", "no-id", "int-id"],
)
def test_receipts_with_wrongly_typed_fields_are_not_complete(status: Any, rid: Any) -> None:
    # attrs does not validate, so an adapter bug can build such a receipt; it must not count
    receipt = Receipt(status=status, id=rid)
    assert receipt_ok(receipt) is False
    assert receipts_complete([receipt]) is False
    assert receipts_complete([Receipt(status=200, id="ok"), receipt]) is False


@pytest.mark.parametrize("status", ["200", True, 200.5, None])
def test_strict_converter_refuses_a_receipt_with_a_non_integer_status(status: Any) -> None:
    with pytest.raises(cattrs.BaseValidationError) as info:
        serde.structure({"status": status, "id": "cap_1"}, Receipt)
    assert "$.status" in serde.error_path(info.value)


def test_strict_converter_accepts_a_well_formed_receipt() -> None:
    data = {"status": 200, "id": "cap_1", "idempotency_key": "k1", "checksum": None}
    assert serde.structure(data, Receipt) == Receipt(status=200, id="cap_1", idempotency_key="k1")
