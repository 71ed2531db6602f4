"""The console reads pages of single runs on a pool of read-only connections: a slow run page
(or six of them) never holds up the run list, the charts or an act, which keep the console's
own connection. Once, six pending step views of a 9,000-event run held the list for 8.4 s."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest

from fsm_agent.console.routes import READERS, Journal
from fsm_agent.journal.store import Store
from fsm_agent.stores import open_store
from tests.lab import LOOKUP, lab_run

WAIT_S = 10.0


@pytest.fixture
def journal_file(tmp_path: Path) -> Path:
    lab_run(tmp_path, [LOOKUP, {"final_answer": "found it"}])
    return tmp_path / "j.db"


def test_run_pages_wait_on_the_pool_while_the_list_reads_at_once(journal_file: Path) -> None:
    primary = open_store(str(journal_file), read_only=True)
    opened: list[Store] = []

    def opener() -> Store:
        store = open_store(str(journal_file), read_only=True)
        opened.append(store)
        return store

    journal = Journal(primary, opener)
    release = threading.Event()
    inside = 0
    most = 0
    lock = threading.Lock()

    def slow_page(store: Store) -> str:
        nonlocal inside, most
        assert store is not primary
        with lock:
            inside += 1
            most = max(most, inside)
        try:
            assert release.wait(WAIT_S)
            return store.list_runs(1)[0].run_id
        finally:
            with lock:
                inside -= 1

    async def main() -> tuple[list[str], list[str]]:
        pages: list[str] = []

        async def page() -> None:
            pages.append(await journal.read_run(slow_page))

        async with anyio.create_task_group() as tg:
            for _ in range(READERS + 2):  # more than the pool holds: two wait their turn
                tg.start_soon(page)
            with anyio.fail_after(WAIT_S):  # the pool is full: READERS pages inside at once
                while inside < READERS:
                    await anyio.sleep(0.01)
            with anyio.fail_after(5):  # the list is not held up by the pages
                listed = await journal.read(lambda s: [r.run_id for r in s.list_runs(10)])
            release.set()
        return pages, listed

    try:
        pages, listed = anyio.run(main)
    finally:
        release.set()
        journal.close()
        primary.close()
    assert len(listed) == 1
    assert pages == listed * (READERS + 2)
    assert most == READERS  # several at once, never more than the pool
    assert 1 <= len(opened) <= READERS
    assert all(getattr(store, "read_only", False) for store in opened)


def test_without_an_opener_run_pages_read_on_the_one_store(journal_file: Path) -> None:
    primary = open_store(str(journal_file), read_only=True)
    journal = Journal(primary)
    try:
        seen = anyio.run(journal.read_run, lambda store: store)
    finally:
        journal.close()
        primary.close()
    assert seen is primary
