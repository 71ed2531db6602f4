"""Which Host header values a console answers: the names it was given, and no other.

A page of another site can reach a console it cannot name: with DNS rebinding its own name
is pointed at the console's address, and the browser then sends that name as the Host
header (and would read the page and its act token). So every request's Host must be one
of the names this module derives from the command line (`answered_hosts`):

- this machine's loopback names (`127.0.0.1`, `localhost`, `[::1]`) when the console
  listens on loopback or on every address (which includes loopback);
- the address it is bound to, when that is a concrete address (not `0.0.0.0` or `::`),
  and the name given as `--host` when it is a name;
- each name given with `--allowed-host` (`allowed_name` checks it is one host name or
  address, no pattern, port or URL).

Listening on every address with no `--allowed-host` is refused (`require_names`): no
other machine could use the console (none of its names would be answered), and serving
any Host instead is the hole this module closes.

Plain Python (no server import), so the command checks its options before it loads one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from fsm_agent.errors import InvalidInputError

#: The names of this machine's loopback, as a Host header carries them.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: One DNS name: labels of letters, digits, `-` and `_` (not first or last), dot-separated.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_PORT = re.compile(r"[0-9]{1,5}")


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only (127.0.0.0/8, ::1, localhost)."""
    address = _address(host)
    return host.lower() == "localhost" or (address is not None and address.is_loopback)


def is_wildcard(host: str) -> bool:
    """Whether listening on `host` listens on every address (`0.0.0.0`, `::`, empty)."""
    address = _address(host)
    return host == "" or (address is not None and address.is_unspecified)


def host_form(host: str) -> str:
    """`host` as a Host header names it: lower case, an IPv6 address in brackets."""
    address = _address(host)
    if address is None:
        return host.lower()
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def header_name(value: str) -> str | None:
    """The host a Host header value names, in `host_form` (its port dropped); None when the
    value is not one host (a bare IPv6 address, a second colon, an empty name …)."""
    value = value.lower()
    if value.startswith("["):
        inside, bracket, port = value[1:].partition("]")
        address = _address(inside)
        if not bracket or address is None or address.version != 6:
            return None
        if port and not (port.startswith(":") and _PORT.fullmatch(port[1:])):
            return None
        return host_form(inside)
    name, colon, port = value.partition(":")
    if colon and not _PORT.fullmatch(port):
        return None
    if not _NAME.fullmatch(name) or len(name) > 253:
        return None
    return host_form(name)


def allowed_name(value: str) -> str:
    """An `--allowed-host` value in `host_form`; `InvalidInputError` saying what to give
    when it is not one host name or address."""
    text = value.strip()
    if not text:
        raise InvalidInputError("give a host name or address, not an empty value")
    if "*" in text:
        raise InvalidInputError(
            f"{value!r} is a pattern: name each host the console answers (repeat"
            " --allowed-host); a pattern would let names nobody chose in"
        )
    if "/" in text:
        raise InvalidInputError(f"{value!r} is not a host name: give the name only, no URL")
    address = _address(text)
    if address is not None:
        if address.is_unspecified:
            raise InvalidInputError(
                f"{value!r} names every address, not a host: give the address or name other"
                " machines use to reach the console"
            )
        return host_form(text)
    if ":" in text:
        raise InvalidInputError(
            f"{value!r} has a port: give the name alone (it is answered on the port the"
            " console listens on)"
        )
    if not _NAME.fullmatch(text.lower()) or len(text) > 253:
        raise InvalidInputError(
            f"{value!r} is not a host name (letters, digits, '-' and '.', as in"
            " console.example.org) or an IP address"
        )
    return host_form(text)


def require_names(host: str, allowed: Iterable[str]) -> None:
    """Refuse (`InvalidInputError`) listening on every address with no name to answer."""
    if is_wildcard(host) and not tuple(allowed):
        shown = host or "''"
        raise InvalidInputError(
            f"--host {shown} listens on every address but names none: add --allowed-host"
            " NAME for each name or address other machines use to reach the console (it"
            " answers no other Host header), or listen on one address (--host ADDR)"
        )


def answered_hosts(host: str, allowed: Iterable[str], bound: str) -> tuple[str, ...]:
    """The Host names a console answers, in `host_form`, first the one its URL shows:
    `host` as given on the command line, `bound` the address its socket is bound to,
    `allowed` the `--allowed-host` names (already `allowed_name`s)."""
    named = list(allowed)
    require_names(host, named)
    if is_wildcard(host):
        return tuple(dict.fromkeys([*named, *LOOPBACK_NAMES]))
    own = [host_form(host), host_form(bound)]
    if is_loopback(host) or is_loopback(bound):
        own += LOOPBACK_NAMES
    return tuple(dict.fromkeys([*own, *named]))
