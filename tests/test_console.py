"""`fsm-agent console` as a real process over HTTP (no browser; the browser tests are in
`tests/test_console_browser.py`): its headers, its escaping, its run list and pages, and
what a read-only console and a cross-site request cannot do."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from fsm_agent.cli.main import cli
from fsm_agent.console.app import CSP
from fsm_agent.console.queries import RunFilters, run_page
from fsm_agent.halt import HaltReason
from fsm_agent.stores.sqlite import SqliteStore
from tests.browser_runs import HOSTILE, SCRIPT, journaled
from tests.console_server import MISS, SEARCH, Console, console, controls, three_runs
from tests.lab import lab_run


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three runs: a completed one, a hostile handoff, and a max_steps one."""
    return three_runs(tmp_path_factory.mktemp("console"))


@pytest.fixture(scope="module")
def read_only(journal: Path) -> Iterator[Console]:
    with console(journal) as c:
        yield c


def test_every_response_carries_the_strict_headers(read_only: Console) -> None:
    for path in ("/", "/runs/done-run", "/charts", "/api/charts", "/static/console.js",
                 "/api/runs/done-run/events/0", "/api/runs/done-run/steps/0", "/api/runs",
                 "/api/runs/done-run/parts", "/no/such/page"):  # fmt: skip
        r = httpx.get(read_only.url + path)
        assert r.headers["content-security-policy"] == CSP, path
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
    assert "'unsafe-inline'" not in CSP
    assert httpx.get(read_only.url + "/static/chart.umd.min.js").status_code == 200


def test_a_foreign_host_header_is_refused(read_only: Console) -> None:
    """DNS rebinding: a page of evil.example resolved to 127.0.0.1 still says its own Host."""
    r = httpx.get(read_only.url + "/", headers={"Host": "evil.example"})
    assert r.status_code == 400
    assert "done-run" not in r.text


def test_hostile_journal_text_is_escaped_everywhere(read_only: Console) -> None:
    listed = httpx.get(read_only.url + "/").text
    (run_id,) = [rid for rid in _ids(listed) if rid not in ("done-run", "capped-run")]
    page = httpx.get(f"{read_only.url}/runs/{run_id}").text
    for text in (listed, page):
        assert SCRIPT not in text
        assert "<img src=x" not in text
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in text
    assert page.count("<script") == 1  # the console's own, from /static
    step = httpx.get(f"{read_only.url}/api/runs/{run_id}/events/1")
    assert step.headers["content-type"] == "application/json"
    assert "<" not in step.text
    assert step.json()["facts"]["reply"] == f"Sure! {HOSTILE}"


def test_what_the_script_draws_again_is_escaped(read_only: Console) -> None:
    """The step viewer's step, the report's parts and the list's rows, as the page's script
    fetches them: HTML inside JSON, every journal string escaped, `<` never raw."""
    listed = _ids(httpx.get(read_only.url + "/").text)
    (run_id,) = [rid for rid in listed if rid not in ("done-run", "capped-run")]
    step = httpx.get(f"{read_only.url}/api/runs/{run_id}/steps/1")
    assert step.status_code == 200
    assert "<" not in step.text
    shown = step.json()["html"]
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in shown
    assert "<script" not in shown
    for part in ("<h3>Guards</h3>", "<h3>Model reply</h3>", "<h3>Meters</h3>", "<details>"):
        assert part in shown, part
    assert httpx.get(f"{read_only.url}/api/runs/{run_id}/steps/99").status_code == 404
    parts = httpx.get(f"{read_only.url}/api/runs/{run_id}/parts").json()["sections"]
    assert set(parts) == {"report-header", "halt", "usage", "diagram", "replay", "timeline"}
    assert all("<script" not in html for html in parts.values())
    rows = httpx.get(read_only.url + "/api/runs", params={"halt_reason": "max_steps"}).json()
    assert _ids(rows["html"]) == ["capped-run"]
    again = httpx.get(
        read_only.url + "/api/runs", params={"halt_reason": "max_steps", "version": rows["version"]}
    ).json()
    assert again == {"version": rows["version"]}  # nothing changed: nothing drawn again
    assert httpx.get(read_only.url + "/api/runs/nope/live").status_code == 404
    assert httpx.get(read_only.url + "/api/runs/done-run/live?after=x").status_code == 400


def _ids(listed: str) -> list[str]:
    return [part.split('"', 1)[0] for part in listed.split('data-run="')[1:]]


def test_the_list_filters_and_the_run_page(read_only: Console) -> None:
    def ids(**query: str) -> list[str]:
        return _ids(httpx.get(read_only.url + "/", params=query).text)

    assert len(ids()) == 3
    assert ids(halt_reason="max_steps") == ["capped-run"]
    assert ids(text="LAB pass") == ["capped-run"]
    assert ids(status="halted", machine="agent_loop", since="1d") == ids()
    assert ids(machine="other") == []
    assert ids(status="paused") == []
    bad = httpx.get(read_only.url + "/", params={"since": "yesterday-ish"})
    assert bad.status_code == 400
    assert "not an ISO date" in bad.text
    page = httpx.get(read_only.url + "/runs/capped-run").text
    for part in ('id="halt"', 'id="diagram"', 'id="replay"', 'id="timeline"', 'id="live"',
                 'id="stepper"', "replay: proven from the journal", "chain: ok"):  # fmt: skip
        assert part in page, part
    assert httpx.get(read_only.url + "/runs/nope").status_code == 404


def test_a_read_only_console_has_no_way_to_write(read_only: Console, journal: Path) -> None:
    before = controls(journal)
    page = httpx.get(read_only.url + "/").text
    assert 'name="console-token"' not in page
    assert 'class="act"' not in page
    for act in ("pause", "raise-budget", "freeze-routing", "unfreeze-routing"):
        r = httpx.post(f"{read_only.url}/acts/{act}", json={"run_id": "done-run", "why": "x"},
                       headers={"Origin": read_only.url})  # fmt: skip
        assert r.status_code in (404, 405), act
    assert controls(journal) == before


def test_acts_refuse_cross_site_requests(journal: Path, tmp_path: Path) -> None:
    with console(journal, "--allow-operator-acts") as c:
        page = httpx.get(c.url + "/").text
        token = page.split('name="console-token" content="', 1)[1].split('"', 1)[0]
        ok = {"Origin": c.url, "X-Console-Token": token}
        body = {"why": "incident 7", "who": "ops-alice"}
        before = controls(journal)
        refused = [
            httpx.post(c.url + "/acts/freeze-routing", json=body, headers={"Origin": c.url}),
            httpx.post(
                c.url + "/acts/freeze-routing",
                json=body,
                headers={**ok, "Origin": "http://evil.example"},
            ),
            httpx.post(
                c.url + "/acts/freeze-routing",
                json=body,
                headers={**ok, "X-Console-Token": "guess"},
            ),
            httpx.post(c.url + "/acts/freeze-routing", data=body, headers=ok),  # a form
            httpx.post(
                c.url + "/acts/freeze-routing",
                json=body,
                headers={**ok, "Sec-Fetch-Site": "cross-site"},
            ),
        ]
        assert [r.status_code for r in refused] == [403] * 5
        assert controls(journal) == before
        assert httpx.get(c.url + "/acts/freeze-routing").status_code == 405
        halted = httpx.post(c.url + "/acts/pause", json={**body, "run_id": "done-run"},
                            headers=ok)  # fmt: skip
        assert halted.status_code == 400
        assert "only a running run pauses" in halted.json()["error"]
        done = httpx.post(c.url + "/acts/freeze-routing", json=body, headers=ok)
        assert done.status_code == 200, done.text
        unfrozen = httpx.post(c.url + "/acts/unfreeze-routing", json=body, headers=ok)
        assert unfrozen.status_code == 200
    assert controls(journal)[len(before) :] == [
        ("freeze_routing", "ops-alice", "incident 7"),
        ("unfreeze_routing", "ops-alice", "incident 7"),
    ]
    # the CLI's act is the same row, column for column (but its number and time)
    cli_act = CliRunner().invoke(
        cli, ["freeze-routing", "--who", "ops-alice", "--why", "incident 7", "--db", str(journal)]
    )
    assert cli_act.exit_code == 0, cli_act.output
    rows = full_controls(journal)
    assert rows[-1][2:] == rows[-3][2:]


def full_controls(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT id, at, run_id, kind, payload, who, why FROM controls"
                            " ORDER BY id").fetchall()  # fmt: skip
    finally:
        conn.close()


def test_keyset_pages_walk_every_run_once(tmp_path: Path) -> None:
    for n in range(5):
        journaled(tmp_path, [SEARCH, {"answer": "30 days"}], run_id=f"run-{n}")
    db = tmp_path / "journal.db"
    lab_run(tmp_path, [MISS] * 3, store=db, budgets={"max_steps": 2}, run_id="run-capped")
    store = SqliteStore(tmp_path / "journal.db", read_only=True)
    try:
        seen, cursor = [], None
        while True:
            page = run_page(store, RunFilters(), cursor, size=2)
            seen += [r.run_id for r in page.runs]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == [r.run_id for r in store.list_runs(None)]
        assert len(seen) == 6
        capped = run_page(store, RunFilters(halt_reason=HaltReason.MAX_STEPS), None, size=2)
        assert [r.run_id for r in capped.runs] == ["run-capped"]
        assert capped.next_cursor is None
    finally:
        store.close()


def test_the_command_names_the_extra_when_the_server_is_missing(journal: Path) -> None:
    code = (
        "import sys; sys.modules['uvicorn'] = None\n"
        "from fsm_agent.cli.main import cli\n"
        f"cli(['console', '--db', {str(journal)!r}], prog_name='fsm-agent')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "pip install 'fsm-agent[console]'" in done.stderr


def test_the_benchmark_journal_pages_every_filter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The benchmark's journal (cloned real runs, 1% cut off) through the console's pages;
    and its program runs end to end at a tiny size (figures are its output, not checked)."""
    from tests.bench import console as bench

    bench.build(tmp_path / "j.db", 300, tmp_path)
    store = SqliteStore(tmp_path / "j.db", read_only=True)
    try:
        seen, cursor = [], None
        while True:
            page = run_page(store, RunFilters(status="interrupted"), cursor, size=2)
            seen += [r.run_id for r in page.runs]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert len(seen) == 3  # runs 7, 107 and 207
        assert run_page(store, RunFilters(status="running"), None).runs == ()
        machine = run_page(store, RunFilters(machine=bench.MACHINES[1]), None)
        assert {r.machine for r in machine.runs} == {bench.MACHINES[1]}
        assert machine.next_cursor is not None
    finally:
        store.close()
    assert bench.main(["--runs", "200", "--rounds", "1", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("baseline", "first page", "deep page", "task text"))


def test_a_host_that_is_not_loopback_is_warned_about_loudly(journal: Path) -> None:
    anywhere = "0.0.0.0"  # noqa: S104 - the warning's case; the process ends at once
    cmd = [sys.executable, "-m", "fsm_agent", "console", "--db", str(journal),
           "--host", anywhere, "--allowed-host", "console.test", "--port", "0"]  # fmt: skip
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("fsm-agent console (read-only) on http://console.test:")
    finally:
        process.terminate()
        _, err = process.communicate(timeout=15)
    assert "WARNING: listening on 0.0.0.0, not loopback" in err
    assert "reads every task, reply and tool result" in err
    assert "It answers only Host console.test, 127.0.0.1, localhost, [::1]." in err
