"""Nothing unverified is shown as fact in the console (issue 27.2): each stored column of a
run's row that a display reads is edited as an insider would (`sqlite3`, after dropping the
runs triggers), and every console surface, served by a real `fsm-agent console` process
over real HTTP, shows what verifies or marks the run unverified: the run list, its
`halt_reason=completed` filter, the charts, the run page's "Now" panel and the live stream.

The command line's surfaces are held to the same rule in `tests/test_unverified_rows.py`.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.console_server import Console, console
from tests.lab import LOOKUP, lab_run
from tests.test_unverified_rows import EDITS, HANDOFF

#: run id -> the edit made to its row
EDITED = {f"edited-{i}": name for i, name in enumerate(EDITS)}
CLEAN, DONE = "clean-handoff", "clean-completed"


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A handoff run per edit, each row edited; an untouched handoff and a completed run."""
    tmp = tmp_path_factory.mktemp("console-truth")
    db = tmp / "j.db"
    for run_id in [*EDITED, CLEAN]:
        assert lab_run(tmp, [HANDOFF], run_id=run_id).halt_reason.value == "handoff_requested"
    lab_run(tmp, [LOOKUP, {"answer": "swordfish"}], run_id=DONE)
    with sqlite3.connect(db) as conn:
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'runs'"
        for (name,) in conn.execute(query).fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        for run_id, edit in EDITED.items():
            assert conn.execute(EDITS[edit], (run_id,)).rowcount == 1
    return db


@pytest.fixture(scope="module")
def served(journal: Path) -> Iterator[Console]:
    with console(journal) as c:
        yield c


def _rows(page: str) -> dict[str, str]:
    """The list's rows by run id: each `<tr>` as served."""
    return {m[1]: m[0] for m in re.finditer(r'<tr data-run="([^"]+)".*?</tr>', page)}


def test_the_list_marks_every_edited_row(served: Console) -> None:
    page = httpx.get(served.url + "/").text
    rows = _rows(page)
    assert set(rows) == {*EDITED, CLEAN, DONE}
    for run_id, edit in EDITED.items():
        row = rows[run_id]
        assert 'class="unverified"' in row, (edit, row)
        assert ">UNVERIFIED</span>" in row, (edit, row)
        assert "DOES NOT VERIFY" in row, (edit, row)  # the verdict, as the mark's title
        assert "badge ok" not in row, (edit, row)  # nothing edited is green
    for run_id in (CLEAN, DONE):
        assert "UNVERIFIED" not in rows[run_id]
    assert "badge ok" in rows[DONE]
    assert "6 row(s) ! unverified: the run&#x27;s chain does not verify" in page


def test_the_completed_filter_marks_what_only_the_row_says(served: Console) -> None:
    rows = _rows(httpx.get(served.url + "/", params={"halt_reason": "completed"}).text)
    said = {rid for rid, edit in EDITED.items() if edit.startswith("halt_reason")}
    assert set(rows) == {DONE, *said}  # the SQL filter reads the row; the row is marked
    for run_id in said:
        assert ">UNVERIFIED</span>" in rows[run_id]
        assert "completed!" in rows[run_id]
        assert "badge ok" not in rows[run_id]
    assert "UNVERIFIED" not in rows[DONE]


def test_the_charts_count_only_what_verifies(served: Console) -> None:
    data = httpx.get(served.url + "/api/charts", params={"since": "1d"}).json()
    assert data["runs"] == 2
    assert data["unverified"] == len(EDITED)
    assert "UNVERIFIED" in data["unverified_note"]
    counts = {k: sum(v) for k, v in data["over_time"]["series"].items()}
    assert counts == {"completed": 1, "handoff_requested": 1}
    per_machine = {k: sum(v) for k, v in data["per_machine"]["series"].items()}
    assert per_machine == counts
    assert sum(sum(v) for v in data["steps_share"]["series"].values()) == 2
    assert set(data["cost"]["labels"]) == {CLEAN, DONE}
    assert [(t["tool"], t["calls"]) for t in data["tools"]] == [("lookup", 1)]


def _now_panel(page: str) -> str:
    return page.split('<section id="live"', 1)[1].split("</section>", 1)[0]


def _first_state(c: Console, run_id: str) -> dict[str, object]:
    with httpx.stream("GET", f"{c.url}/api/runs/{run_id}/live", timeout=30) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: "):
                data: dict[str, object] = json.loads(line[len("data: ") :])
                return data
    raise AssertionError("the stream sent no state")


@pytest.mark.parametrize("run_id", list(EDITED))
def test_the_run_page_and_its_stream_mark_an_edited_run(served: Console, run_id: str) -> None:
    edit = EDITED[run_id]
    page = httpx.get(f"{served.url}/runs/{run_id}").text
    panel = _now_panel(page)
    assert panel.startswith(' class="unverified"'), (edit, panel)
    assert ">UNVERIFIED</span>" in panel, (edit, panel)
    assert "DOES NOT VERIFY" in panel
    state = _first_state(served, run_id)
    assert state["verified"] is False, (edit, state)
    assert "DOES NOT VERIFY" in str(state["unverified"])
    assert "may have been edited" in str(state["unverified_note"])


@pytest.mark.parametrize("run_id", [CLEAN, DONE])
def test_an_untouched_run_is_shown_as_fact(served: Console, run_id: str) -> None:
    panel = _now_panel(httpx.get(f"{served.url}/runs/{run_id}").text)
    assert "UNVERIFIED" not in panel
    assert "wall clock used" in panel  # a halted run's final meters, not a countdown
    state = _first_state(served, run_id)
    assert state["verified"] is True
    assert state["unverified"] is None
    assert state["ended"] is True
