"""The console's network edge (issue 27.5): which Host header values a console answers.

Real `fsm-agent console` processes on 127.0.0.1, on ::1, on every address and on this
machine's own address, asked over real sockets with crafted Host headers: its own names get
the page (and, with acts, its token, and a POST act is journaled); any other name, a
rebinding attacker's above all, gets a plain 400 with no page, no token and no act. And the
command refusing, with one `Error:` line and exit 2, the options that would answer any Host.
The browser half (a DNS-rebinding page in Chromium, an act over IPv6) is at the end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import attrs
import httpx
import pytest
from click.testing import CliRunner

from fsm_agent.cli.main import cli
from fsm_agent.console.app import CSP
from fsm_agent.console.hosts import (
    LOOPBACK_NAMES,
    allowed_name,
    answered_hosts,
    header_name,
    is_loopback,
    is_wildcard,
)
from fsm_agent.errors import InvalidInputError
from tests.browser_page import launch_chromium, watched_page
from tests.console_server import ROOT, START_S, controls, stop, three_runs

if TYPE_CHECKING:
    from playwright.sync_api import Browser

ATTACKER = "rebind.attacker.example"
ANYWHERE = "0.0.0.0"  # noqa: S104 - the refused and the named cases bind it on purpose
ACT = {"why": "incident 27", "who": "ops-alice"}


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return three_runs(tmp_path_factory.mktemp("console-hosts"))


# --- which names, decided without a server ------------------------------------------------


def test_only_loopback_is_loopback_and_only_any_is_any() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"))
    assert not any(is_loopback(h) for h in (ANYWHERE, "192.168.1.4", "example.com", "::"))
    assert all(is_wildcard(h) for h in (ANYWHERE, "::", "[::]", ""))
    assert not any(is_wildcard(h) for h in ("127.0.0.1", "::1", "192.168.1.4", "example.com"))


@pytest.mark.parametrize(
    ("host", "allowed", "bound", "answered"),
    [
        ("127.0.0.1", (), "127.0.0.1", ("127.0.0.1", "localhost", "[::1]")),
        ("::1", (), "::1", ("[::1]", "127.0.0.1", "localhost")),
        ("localhost", (), "127.0.0.1", ("localhost", "127.0.0.1", "[::1]")),
        ("127.0.0.2", (), "127.0.0.2", ("127.0.0.2", "127.0.0.1", "localhost", "[::1]")),
        ("127.0.0.1", ("devbox",), "127.0.0.1", ("127.0.0.1", "localhost", "[::1]", "devbox")),
        (ANYWHERE, ("console.test",), ANYWHERE, ("console.test", *LOOPBACK_NAMES)),
        ("::", ("[fd00::2]",), "::", ("[fd00::2]", *LOOPBACK_NAMES)),
        ("192.0.2.2", (), "192.0.2.2", ("192.0.2.2",)),
        ("192.0.2.2", ("console.test",), "192.0.2.2", ("192.0.2.2", "console.test")),
        ("fd00::2", (), "fd00::2", ("[fd00::2]",)),
        ("DevBox.lan", (), "192.0.2.2", ("devbox.lan", "192.0.2.2")),
    ],
)
def test_the_names_a_console_answers(
    host: str, allowed: tuple[str, ...], bound: str, answered: tuple[str, ...]
) -> None:
    """Its own names (loopback's when it can be reached there), the names given, nothing else;
    the first is the one its URL shows. Never `*`, never the unspecified address."""
    assert answered_hosts(host, allowed, bound) == answered


@pytest.mark.parametrize("host", [ANYWHERE, "::", ""])
def test_every_address_and_no_name_is_refused(host: str) -> None:
    with pytest.raises(InvalidInputError, match="listens on every address but names none"):
        answered_hosts(host, (), host)


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("localhost:8470", "localhost"),
        ("LocalHost", "localhost"),
        ("127.0.0.1:8470", "127.0.0.1"),
        ("[::1]:8470", "[::1]"),
        ("[::1]", "[::1]"),
        ("[0:0:0:0:0:0:0:1]:80", "[::1]"),
        (f"{ATTACKER}:8470", ATTACKER),
        ("::1", None),  # an IPv6 address is bracketed in a Host header
        ("[::1", None),
        ("[::1]8470", None),
        ("[127.0.0.1]", None),
        ("localhost:80:90", None),
        ("localhost:", None),
        ("localhost:http", None),
        ("", None),
        ("local host", None),
        ("localhost/x", None),
    ],
)
def test_a_host_header_names_one_host_or_none(value: str, name: str | None) -> None:
    assert header_name(value) == name


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("console.example.org", "console.example.org"),
        ("Console.Example.Org", "console.example.org"),
        ("192.0.2.2", "192.0.2.2"),
        ("fd00::2", "[fd00::2]"),
        ("[fd00:0::2]", "[fd00::2]"),
        ("devbox", "devbox"),
    ],
)
def test_an_allowed_host_is_kept_as_a_host_header_names_it(value: str, name: str) -> None:
    assert allowed_name(value) == name
    assert header_name(f"{name}:8470") == name


# --- the command refuses what would answer any Host ---------------------------------------

REFUSED = [
    (["--host", ANYWHERE], "Error: --host 0.0.0.0 listens on every address but names none"),
    (["--host", "::"], "Error: --host :: listens on every address but names none"),
    (["--host", "[::]"], "Error: --host :: listens on every address but names none"),
    (["--host", ""], "Error: --host '' listens on every address but names none"),
    (["--allowed-host", "*"], "'*' is a pattern: name each host the console answers"),
    (["--allowed-host", "*.example.com"], "'*.example.com' is a pattern"),
    (["--allowed-host", "http://x.example/"], "is not a host name: give the name only, no URL"),
    (["--allowed-host", "x.example:8470"], "'x.example:8470' has a port: give the name alone"),
    (["--allowed-host", ANYWHERE], "'0.0.0.0' names every address, not a host"),
    (["--allowed-host", "::"], "'::' names every address, not a host"),
    (["--allowed-host", ""], "give a host name or address, not an empty value"),
    (["--allowed-host", "bad name"], "'bad name' is not a host name"),
]


@pytest.mark.parametrize(("args", "said"), REFUSED)
def test_the_command_refuses_any_host(journal: Path, args: list[str], said: str) -> None:
    """Before anything listens: exit 2, one `Error:` line, no traceback."""
    done = CliRunner().invoke(cli, ["console", "--db", str(journal), "--port", "0", *args],
                              catch_exceptions=False)  # fmt: skip
    assert done.exit_code == 2, done.output
    assert said in done.output
    errors = [line for line in done.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.output
    if args[0] == "--allowed-host":
        assert errors[0].startswith("Error: Invalid value for '--allowed-host': ")
    assert "Traceback" not in done.output


def test_the_refusal_is_a_real_process_ending_at_once(journal: Path) -> None:
    cmd = [sys.executable, "-m", "fsm_agent", "console", "--db", str(journal), "--host", ANYWHERE,
           "--allow-operator-acts"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("Error: --host 0.0.0.0 listens on every address but names none:")
    assert "add --allowed-host NAME" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr


# --- real servers, real sockets -----------------------------------------------------------


@attrs.frozen
class Served:
    """A running console: the URL it printed, its port, its process."""

    url: str
    port: int
    process: subprocess.Popen[str]

    def get(self, reach: str, host: str, path: str = "/") -> httpx.Response:
        """GET `path` from the socket at `reach` (an address), saying `Host: host`."""
        return httpx.get(f"http://{reach}:{self.port}{path}", headers={"Host": host}, timeout=10)

    def act(self, reach: str, host: str, token: str, origin: str | None = None) -> httpx.Response:
        """POST a routing freeze as the console's page would from `host` (its Origin)."""
        headers = {"Host": host, "Origin": origin or f"http://{host}", "X-Console-Token": token}
        return httpx.post(f"http://{reach}:{self.port}/acts/freeze-routing", json=ACT,
                          headers=headers, timeout=10)  # fmt: skip

    def stderr(self) -> str:
        """Its stderr, once stopped."""
        self.process.terminate()
        return self.process.communicate(timeout=15)[1]


@contextmanager
def serving(db: Path, reach: str, *args: str) -> Iterator[Served]:
    """`fsm-agent console --db DB --port 0 ARGS…`, ready once it answers at `reach` (an
    address) to the name its URL shows; stopped afterwards."""
    cmd = [sys.executable, "-m", "fsm_agent", "console", "--db", str(db), "--port", "0", *args]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert " on http://" in line, (line, process.communicate(timeout=15))
        url = line.strip().rsplit(" ", 1)[-1].rstrip("/")
        served = Served(url, int(urlsplit(url).port or 0), process)
        deadline = time.monotonic() + START_S
        while not _answers(served, reach, urlsplit(url).netloc):
            assert time.monotonic() < deadline, f"the console at {url} did not answer"
            time.sleep(0.05)
        yield served
    finally:
        stop(process)


def _answers(served: Served, reach: str, host: str) -> bool:
    try:
        return served.get(reach, host, "/static/console.css").status_code == 200
    except httpx.HTTPError:
        return False


def token_of(page: str) -> str:
    return page.split('name="console-token" content="', 1)[1].split('"', 1)[0]


def assert_refused(r: httpx.Response, token: str | None = None) -> None:
    """A plain 400 that says why, with the strict headers and nothing of the console."""
    assert r.status_code == 400, (r.status_code, r.text[:200])
    assert r.headers["content-type"].startswith("text/plain")
    assert r.headers["content-security-policy"] == CSP
    assert "this console does not answer to" in r.text
    assert "--allowed-host NAME" in r.text
    assert "console-token" not in r.text
    assert "done-run" not in r.text
    assert token is None or token not in r.text


def foreign(port: int) -> list[str]:
    """Host values a console on loopback must not answer: a rebinding attacker's name (with
    and without the port), names that only start or end like its own, the unspecified
    address, another machine, a bare IPv6 address, garbage."""
    return [
        ATTACKER,
        f"{ATTACKER}:{port}",
        f"localhost.{ATTACKER}:{port}",
        f"127.0.0.1.{ATTACKER}",
        f"{ATTACKER}.localhost",
        f"{ANYWHERE}:{port}",
        f"[::]:{port}",
        "192.0.2.77",
        "::1",
        "localhost:80:90",
        "",
    ]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")


def test_on_loopback_its_own_names_get_the_page_and_nothing_else_does(journal: Path) -> None:
    before = controls(journal)
    with serving(journal, "127.0.0.1", "--allow-operator-acts") as c:
        assert c.url == f"http://127.0.0.1:{c.port}"
        page = c.get("127.0.0.1", f"127.0.0.1:{c.port}")
        assert page.status_code == 200
        token = token_of(page.text)
        own_names = ("localhost", "LOCALHOST", "127.0.0.1", f"[::1]:{c.port}")
        for own in (f"localhost:{c.port}", *own_names):
            r = c.get("127.0.0.1", own)
            assert r.status_code == 200, own
            assert token_of(r.text) == token
        for host in foreign(c.port):
            assert_refused(c.get("127.0.0.1", host), token)
            assert_refused(c.get("127.0.0.1", host, "/api/runs/done-run/events/0"), token)
        # a rebinding page that got the token anyway (it cannot: above) still cannot act
        attacker = f"{ATTACKER}:{c.port}"
        assert_refused(c.act("127.0.0.1", attacker, token))
        assert_refused(c.act("127.0.0.1", attacker, token, origin=f"http://localhost:{c.port}"))
        assert controls(journal) == before
        done = c.act("127.0.0.1", f"localhost:{c.port}", token)
        assert done.status_code == 200, done.text
        assert done.json()["message"].startswith("routing frozen")
        assert c.stderr() == "fsm-agent: stopped by SIGTERM, outside a run\n"  # no warning
    assert controls(journal)[len(before) :] == [("freeze_routing", "ops-alice", "incident 27")]


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_no_host_or_two_hosts_is_refused_too(journal: Path) -> None:
    """Over a raw socket, as no browser would send it."""
    with serving(journal, "127.0.0.1") as c:
        ok = _raw(c.port, b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 ")
        none = _raw(c.port, b"GET / HTTP/1.0\r\n\r\n")
        assert none.startswith(b"HTTP/1.1 400 ")
        assert b"this console does not answer to a request with no Host header" in none
        two = b"GET / HTTP/1.1\r\nHost: localhost\r\nHost: " + ATTACKER.encode() + b"\r\n\r\n"
        answer = _raw(c.port, two)
        assert answer.startswith(b"HTTP/1.1 400 ")
        assert b"done-run" not in answer


@needs_ipv6
def test_ipv6_loopback_serves_and_acts(journal: Path) -> None:
    before = controls(journal)
    with serving(journal, "[::1]", "--host", "::1", "--allow-operator-acts") as c:
        assert c.url == f"http://[::1]:{c.port}"
        page = httpx.get(c.url + "/", timeout=10)  # the Host httpx says itself: [::1]:PORT
        assert page.status_code == 200
        assert "done-run" in page.text
        token = token_of(page.text)
        for own in ("[::1]", "[0:0:0:0:0:0:0:1]:1", f"localhost:{c.port}", "127.0.0.1"):
            assert c.get("[::1]", own).status_code == 200, own
        for host in foreign(c.port):
            assert_refused(c.get("[::1]", host), token)
        assert_refused(c.act("[::1]", f"{ATTACKER}:{c.port}", token))
        assert controls(journal) == before
        done = httpx.post(c.url + "/acts/freeze-routing", json=ACT, timeout=10,
                          headers={"Origin": c.url, "X-Console-Token": token})  # fmt: skip
        assert done.status_code == 200, done.text
    assert controls(journal)[len(before) :] == [("freeze_routing", "ops-alice", "incident 27")]


@needs_ipv6
def test_the_bracketed_ipv6_form_of_host_is_the_same_console(journal: Path) -> None:
    with serving(journal, "[::1]", "--host", "[::1]") as c:
        assert c.url == f"http://[::1]:{c.port}"
        assert httpx.get(c.url + "/", timeout=10).status_code == 200


def test_every_address_answers_only_the_names_given(journal: Path) -> None:
    """The tester's case: --host 0.0.0.0 used to answer any Host, the attacker's included."""
    before = controls(journal)
    args = ("--host", ANYWHERE, "--allowed-host", "Console.Test", "--allow-operator-acts")
    with serving(journal, "127.0.0.1", *args) as c:
        assert c.url == f"http://console.test:{c.port}"  # the URL shows a name it answers
        page = c.get("127.0.0.1", f"console.test:{c.port}")
        assert page.status_code == 200
        token = token_of(page.text)
        assert c.get("127.0.0.1", f"localhost:{c.port}").status_code == 200  # loopback too
        for host in [*foreign(c.port), f"{ANYWHERE}:{c.port}", f"other.test:{c.port}"]:
            assert_refused(c.get("127.0.0.1", host), token)
        mine = own_address()
        if mine is not None:  # its address is not a name given: refused, and says how
            assert_refused(c.get(mine, f"{mine}:{c.port}"), token)
        assert_refused(c.act("127.0.0.1", f"{ATTACKER}:{c.port}", token))
        assert controls(journal) == before
        done = c.act("127.0.0.1", f"console.test:{c.port}", token)
        assert done.status_code == 200, done.text
        err = c.stderr()
    assert controls(journal)[len(before) :] == [("freeze_routing", "ops-alice", "incident 27")]
    assert "WARNING: listening on 0.0.0.0, not loopback: anyone who can reach it reads" in err
    assert "and can pause runs and raise their caps" in err
    assert "It answers only Host console.test, 127.0.0.1, localhost, [::1]." in err


def own_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(sock.getsockname()[0])
    return None if is_loopback(address) or is_wildcard(address) else address


def test_a_concrete_address_answers_itself_and_the_names_given(journal: Path) -> None:
    mine = own_address()
    if mine is None:
        pytest.skip("this machine has no address but loopback")
    with serving(journal, mine, "--host", mine, "--allowed-host", "console.test") as c:
        assert c.url == f"http://{mine}:{c.port}"
        assert c.get(mine, f"{mine}:{c.port}").status_code == 200
        assert c.get(mine, f"console.test:{c.port}").status_code == 200
        for host in [*foreign(c.port), f"localhost:{c.port}", f"127.0.0.1:{c.port}"]:
            assert_refused(c.get(mine, host))
        err = c.stderr()
    assert f"WARNING: listening on {mine}, not loopback" in err
    assert f"It answers only Host {mine}, console.test." in err


# --- in Chromium --------------------------------------------------------------------------

#: The rebinding attacker's page: served as ATTACKER first, it then reads its own origin,
#: which DNS now points at the console, and tries to take the token and freeze routing.
REBIND = """<!doctype html><title>cute cats</title><script>
(async () => {
  const page = await fetch('/');
  const text = await page.text();
  const found = text.match(/name="console-token" content="([^"]+)"/);
  const act = await fetch('/acts/freeze-routing', {method: 'POST',
    headers: {'Content-Type': 'application/json', 'X-Console-Token': found ? found[1] : 'x'},
    body: JSON.stringify({why: 'pwned', who: 'attacker'})});
  window.outcome = {page: page.status, token: !!found, text: text.slice(0, 300),
                    act: act.status, runs: text.includes('done-run')};
})();
</script>"""


#: Chromium flags: DNS answers ATTACKER with loopback; no Local Network Access checks.
REBINDING_BROWSER = (
    f"--host-resolver-rules=MAP {ATTACKER} 127.0.0.1",
    "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests",
)


def chromium(*args: str) -> AbstractContextManager[Browser]:
    """Headless chromium with more flags, closed afterwards (skips when it is missing)."""
    return contextmanager(launch_chromium)(args)


@pytest.mark.parametrize(
    "args",
    [(), ("--host", ANYWHERE, "--allowed-host", "console.test")],
    ids=["loopback", "every-address"],
)
def test_a_dns_rebinding_page_in_chromium_gets_nothing(
    journal: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Chromium resolves ATTACKER to 127.0.0.1 (as a rebinding DNS answers its second time):
    the attacker's page, from its own origin, fetches the console and gets a 400. Chromium's
    own Local Network Access checks are off, as in a browser without them (they would stop
    the fetch before it reached the console; the console must not rely on them)."""
    before = controls(journal)
    with serving(journal, "127.0.0.1", *args, "--allow-operator-acts") as c:
        origin = f"http://{ATTACKER}:{c.port}"
        with chromium(*REBINDING_BROWSER) as browser:
            seen = watched_page(browser, allowed=(origin + "/",))
            try:
                seen.page.route(origin + "/cats", lambda route: route.fulfill(
                    status=200, content_type="text/html", body=REBIND))  # fmt: skip
                seen.page.goto(origin + "/cats")
                outcome = seen.page.wait_for_function("() => window.outcome").json_value()
                shown = seen.page.goto(origin + "/")
                assert shown is not None
                assert shown.status == 400
                seen.page.screenshot(path=str(tmp_path / "rebind.png"))
                body = seen.page.text_content("body") or ""
                assert seen.blocked == []
            finally:
                seen.close()
    assert outcome == {"page": 400, "token": False, "act": 400, "runs": False,
                       "text": outcome["text"]}  # fmt: skip
    assert outcome["text"].startswith(f"this console does not answer to Host '{origin[7:]}'")
    assert body.startswith(f"this console does not answer to Host '{origin[7:]}'")
    assert controls(journal) == before


@needs_ipv6
def test_an_act_from_the_page_over_ipv6_loopback_in_chromium(journal: Path, tmp_path: Path) -> None:
    before = controls(journal)
    with (
        serving(journal, "[::1]", "--host", "::1", "--allow-operator-acts") as c,
        chromium() as browser,
    ):
        seen = watched_page(browser, allowed=(c.url + "/",))
        try:
            page = seen.page
            page.goto(c.url + "/")
            assert page.locator("#runs tbody tr").count() == 3
            form = page.locator('form.act[data-act="freeze-routing"]')
            form.locator("input[name=why]").fill("incident 27")
            form.locator("input[name=who]").fill("ops-alice")
            form.locator("button").click()
            page.wait_for_function(
                "() => document.querySelector('form.act[data-act=freeze-routing] output')"
                ".textContent.startsWith('routing frozen')"
            )
            page.screenshot(path=str(tmp_path / "ipv6.png"), full_page=True)
            assert seen.problems() == {"blocked": [], "errors": [], "dialogs": []}
        finally:
            seen.close()
    assert controls(journal)[len(before) :] == [("freeze_routing", "ops-alice", "incident 27")]
