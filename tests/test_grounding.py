"""A final answer completes a run only when what receipted tool calls returned backs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from fsm_agent import HaltReason
from fsm_agent.runtime.grounding import concrete_values, ground, norm
from fsm_agent.runtime.proposals import Rejection, parse_reply
from fsm_agent.runtime.snapshot import Receipted
from tests.lab import LOOKUP, MISS, lab_run


@pytest.mark.parametrize(
    "answer", ["swordfish", "The lab password is Swordfish.", "swordfish (fact:lab password)"]
)
def test_an_answer_grounded_in_a_receipted_result_completes(tmp_path: Path, answer: str) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"answer": answer}])
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.answer == answer


def test_an_invented_answer_after_a_receipt_is_schema_fail(tmp_path: Path) -> None:
    invented = {"answer": "hunter2 (made up)"}
    record = lab_run(tmp_path, [LOOKUP, invented, invented, invented])
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
    assert record.answer is None
    assert record.error is not None
    assert "it states 'hunter2', which no receipted tool result returned" in record.error
    assert record.meters.retries_used == 2


def test_an_answer_echoing_an_unreceipted_observation_is_refused(tmp_path: Path) -> None:
    # The miss comes back without receipts, so its text grounds nothing.
    echo = {"answer": "No exact match. Refine your query and look up again."}
    record = lab_run(tmp_path, [MISS, echo], budgets={"max_retries": 0})
    assert record.halt_reason is HaltReason.SCHEMA_FAIL


def test_a_handoff_may_carry_arguments_for_the_packet(tmp_path: Path) -> None:
    reply = {"handoff": {"why": "needs approval", "args": {"amount_cents": 1299}}}
    record = lab_run(tmp_path, [reply])
    assert record.halt_reason is HaltReason.HANDOFF_REQUESTED
    assert record.handoff is not None
    assert record.handoff.frozen_args == {"amount_cents": 1299}
    rejected = parse_reply({"handoff": {"why": "x", "extra": 1}}, step=1, max_steps=8)
    assert isinstance(rejected, Rejection)
    assert rejected.kind == "schema_fail"


# --- success rules 2: the grounding rule itself, both sides (fsm_agent.runtime.grounding)
# ---------------

WORDS = st.sampled_from(["the", "code", "is", "ticket", "closed", "value", "and", "was"])
#: values a tool returns: codes, amounts, identifiers, plain words
VALUES = st.one_of(
    st.from_regex(r"[a-z]{3,8}-[0-9]{1,4}", fullmatch=True),
    st.integers(10, 10**6).map(str),
    st.from_regex(r"(cap|ord|doc)_[0-9]{1,3}", fullmatch=True),
    st.from_regex(r"[a-z]{4,9}", fullmatch=True),
)


def _call(values: list[str], ids: list[str]) -> Receipted:
    return Receipted(step=1, name="lookup", values=tuple(values), ids=tuple(ids))


@given(
    value=VALUES,
    others=st.lists(VALUES, max_size=3),
    before=st.lists(WORDS, max_size=4),
    after=st.lists(WORDS, max_size=4),
)
def test_an_answer_built_from_a_returned_value_is_grounded(
    value: str, others: list[str], before: list[str], after: list[str]
) -> None:
    answer = " ".join([*before, value, *after]) + "."
    verdict = ground(answer, (_call([*others, value], ["rcpt-1"]),))
    assert verdict.grounded, (answer, verdict)
    assert verdict.backed_by == ("step 1: lookup",)


@given(
    values=st.lists(VALUES, min_size=1, max_size=4),
    invented=st.integers(10, 10**9),
    words=st.lists(WORDS, max_size=4),
    cite=st.booleans(),
)
def test_an_answer_stating_a_number_nothing_returned_is_not_grounded(
    values: list[str], invented: int, words: list[str], cite: bool
) -> None:
    assume(all(str(invented) not in v for v in values))
    answer = " ".join([*words, values[0], "is", f"{invented:,}"])
    if cite:
        answer += " (source: rcpt-1)"
    verdict = ground(answer, (_call(values, ["rcpt-1"]),))
    assert not verdict.grounded
    assert verdict.missing == (str(invented),)


@given(ids=st.lists(VALUES, min_size=1, max_size=3), words=st.lists(WORDS, max_size=3))
def test_citing_receipt_ids_alone_grounds_nothing(ids: list[str], words: list[str]) -> None:
    answer = " ".join([*words, "see", *ids])
    verdict = ground(answer, (_call(["unrelated words here"], ids),))
    assert verdict.missing == ()  # the ids are there to cite ...
    assert not verdict.grounded  # ... but they back nothing


@given(value=VALUES, words=st.lists(WORDS, min_size=1, max_size=4))
def test_grounded_means_every_concrete_value_was_returned(value: str, words: list[str]) -> None:
    answer = " ".join([value, *words])
    verdict = ground(answer, (_call([value], []),))
    returned = (*concrete_values(value), norm(value))
    assert verdict.grounded == all(c in returned for c in concrete_values(answer))


@pytest.mark.parametrize(
    ("text", "values"),
    [
        (
            "Paid $1,299.00 on 2026-12-01 to cap_1 via https://pay.example/c?id=9.",
            ("https://pay.example/c?id=9", "1299", "2026-12-01", "cap_1"),
        ),
        (
            "Open 'blue door' then `ls /tmp`; mail ops@example.com",
            ("blue door", "ls /tmp", "ops@example.com"),
        ),
        ("It's the customer's ticket, well-known and closed.", ()),
    ],
)
def test_concrete_values_are_numbers_codes_dates_urls_and_quotes(
    text: str, values: tuple[str, ...]
) -> None:
    assert concrete_values(text) == values
