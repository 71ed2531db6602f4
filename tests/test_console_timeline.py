"""The run page of a long run lists a page of its transitions (the newest by default), with
links to the pages before and after; the live redraw keeps the page shown. Once, the page of
a 9,000-event run weighed 7.6 MB."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fsm_agent.console.pages import TIMELINE_PAGE
from fsm_agent.stores.sqlite import SqliteStore
from tests.console_server import Console, console
from tests.lab import MISS, lab_run

STEPS = 90  # about three events a step: more than one page of the timeline


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    folder = tmp_path_factory.mktemp("timeline")
    record = lab_run(folder, [MISS] * (STEPS + 1), budgets={"max_steps": STEPS})
    store = SqliteStore(folder / "j.db", read_only=True)
    try:
        count = len(store.events(record.run_id))
    finally:
        store.close()
    assert count > TIMELINE_PAGE + 20
    return folder / "j.db", record.run_id, count


@pytest.fixture(scope="module")
def served(long_run: tuple[Path, str, int]) -> Iterator[Console]:
    with console(long_run[0]) as running:
        yield running


def _seqs(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'<tr id="seq-(\d+)"', html)]


def test_the_page_lists_the_newest_page_of_transitions_with_a_link_to_earlier(
    served: Console, long_run: tuple[Path, str, int]
) -> None:
    _, run_id, count = long_run
    page = httpx.get(f"{served.url}/runs/{run_id}", timeout=30)
    assert page.status_code == 200
    assert _seqs(page.text) == list(range(count - TIMELINE_PAGE, count))
    assert f"Timeline: {count} journaled transitions" in page.text
    first = count - TIMELINE_PAGE
    assert f"seq {first} to {count - 1} of {count}" in page.text
    assert f'href="/runs/{run_id}?upto={first - 1}" rel="prev">earlier' in page.text
    assert 'rel="next"' not in page.text  # the newest page has nothing after it


def test_an_earlier_page_and_its_redrawn_parts_list_the_same_seqs(
    served: Console, long_run: tuple[Path, str, int]
) -> None:
    _, run_id, count = long_run
    page = httpx.get(f"{served.url}/runs/{run_id}?upto=50", timeout=30)
    assert _seqs(page.text) == list(range(51))
    assert "seq 0 to 50 of" in page.text
    assert 'rel="prev"' not in page.text  # nothing before seq 0
    assert f'href="/runs/{run_id}?upto={50 + TIMELINE_PAGE}" rel="next">later' in page.text
    assert f'href="/runs/{run_id}">newest' in page.text
    parts = httpx.get(f"{served.url}/api/runs/{run_id}/parts?upto=50", timeout=30).json()
    assert _seqs(parts["sections"]["timeline"]) == list(range(51))
    beyond = httpx.get(f"{served.url}/runs/{run_id}?upto={count + 500}", timeout=30)
    assert _seqs(beyond.text) == list(range(count - TIMELINE_PAGE, count))


@pytest.mark.parametrize("upto", ["-1", "ten", "5x", "٣"])
def test_a_bad_page_is_refused_naming_it(
    served: Console, long_run: tuple[Path, str, int], upto: str
) -> None:
    _, run_id, _ = long_run
    page = httpx.get(f"{served.url}/runs/{run_id}", params={"upto": upto}, timeout=30)
    assert page.status_code == 400
    assert "upto must be a sequence number" in page.text
    parts = httpx.get(f"{served.url}/api/runs/{run_id}/parts", params={"upto": upto}, timeout=30)
    assert parts.status_code == 400
    assert "upto must be a sequence number" in parts.json()["error"]


def test_a_step_view_reads_one_event_of_the_long_run(
    served: Console, long_run: tuple[Path, str, int]
) -> None:
    _, run_id, count = long_run
    for seq in (0, 1, count // 2, count - 1):
        step = httpx.get(f"{served.url}/api/runs/{run_id}/steps/{seq}", timeout=30)
        assert step.status_code == 200
        assert step.json()["seq"] == seq
        assert f'data-seq="{seq}"' in step.json()["html"]
        event = httpx.get(f"{served.url}/api/runs/{run_id}/events/{seq}", timeout=30)
        assert event.json()["seq"] == seq
    missing = httpx.get(f"{served.url}/api/runs/{run_id}/steps/{count}", timeout=30)
    assert missing.status_code == 404
