"""Secrets never leave in any form (issue 27.4): a secret is redacted before anything is
previewed, cut or encoded, as text (any case, percent-encoded, any JSON spelling), as hex
and as base64 (standard or URL-safe, at each alignment inside a longer base64 string).

The proof is a scan: no 16-character piece of the secret, in any of those forms (and as
HTML or JSON would write them), is in what leaves a run — the journal's bytes (the SQLite
file and its WAL), the halt record, the trace copy, the run file (`export`), the report,
what `show`, `replay` and `runs` print, the console's pages and the OTLP bodies sent live and
by `export-traces`. The runs are real: `fsm-agent run` as a subprocess, a tools module, a
`python:` model and a user action the test writes, `--secret-env`.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent.redaction import Redactor, Secret
from fsm_agent.runtime.outcomes import NOT_KEPT, PREVIEW_CHARS, jsonable
from fsm_agent.runtime.usage import MAX_NAME_CHARS, ModelUsage, call_usage

ROOT = Path(__file__).resolve().parent.parent
KEY_ENV = "FSM_TEST_FORMS_KEY"
MARKER = f"[redacted:{KEY_ENV}]"
#: 128 characters: letters and digits, and the characters that JSON, percent-encoding,
#: HTML and base64 each write differently (`/`, `+`, `"`, `\`, a space, `%`, `&`, `<`,
#: non-ASCII, one outside the BMP).
KEY = (
    'sk-live_DxAcYnb/nMXMUnav+Evbzy6xJJ"4rYLSdW8wo\\WCBr2KZ NHzAfNe6bR%fLw4UKé42Wq8Bx€c9i1n6m'
    "\U0001f60003M6uOSG=ePdTZNULRQ&1vNbjfjy1<SkDESms-gB"
)
#: The length of the pieces the scan looks for.
PIECE = 16


def u_escaped(text: str) -> str:
    """Every character as `\\uXXXX` (upper-case hex), as some servers write it."""
    return "".join(json.dumps(c)[1:-1] if ord(c) > 0xFFFF else f"\\u{ord(c):04X}" for c in text)


def emitted(secret: str) -> dict[str, str]:
    """How a careless tool or model hands a secret back: in every form the runtime must
    catch, the encoded ones inside longer encoded text, as they would be."""
    data = secret.encode()
    forms = {
        "as is": secret,
        "upper case": secret.upper(),
        "lower case": secret.lower(),
        "JSON-escaped": json.dumps(secret),
        "JSON-escaped twice": json.dumps(json.dumps(secret)),
        "\\u-escaped": u_escaped(secret),
        "hex": data.hex(),
        "HEX": data.hex().upper(),
        "percent-encoded": quote(secret, safe=""),
        "percent-encoded, lower-case hex": "".join(f"%{b:02x}" for b in data),
        "form-encoded": quote_plus(secret),
        "upper case, percent-encoded": quote(secret.upper(), safe=""),
    }
    for before in (b"", b"u", b"us", b"user:", b"Bearer:"):  # 0, 1, 2, 2 and 1 bytes past
        for name, encode in (("base64", base64.b64encode), ("URL-safe", base64.urlsafe_b64encode)):
            forms[f"{name} after {before!r}"] = encode(before + data + b":2026").decode()
        std = base64.b64encode(before + data).decode()
        forms[f"base64 after {before!r}, percent-encoded"] = quote(std, safe="")
    return forms


def _stable_base64(data: bytes) -> set[str]:
    """The base64 text only `data`'s bits decide, at each alignment, standard and URL-safe
    (each also percent-encoded): what two encodings with opposite surroundings share."""
    found: set[str] = set()
    for offset in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            low = encode(bytes(offset) + data + bytes(3)).decode()
            high = encode(b"\xff" * offset + data + b"\xff" * 3).decode()
            for a, b in ((low, high), (quote(low, safe=""), quote(high, safe=""))):
                found |= _pieces(a) & _pieces(b)
    return found


def _pieces(text: str) -> set[str]:
    return {text[i : i + PIECE] for i in range(len(text) - PIECE + 1)}


def forbidden(secret: str) -> frozenset[bytes]:
    """Every piece of `secret` no output may hold: each `PIECE`-byte window of each text
    form (as emitted, as HTML escapes it, as JSON writes it, in either way JSON writes
    non-ASCII), and of the base64 only the secret decides; lower-cased, for a scan that
    ignores case."""
    data = secret.encode()
    texts = [f for name, f in emitted(secret).items() if "base64" not in name]
    texts += [secret.upper(), secret.lower(), data.hex()]
    texts += [html.escape(t) for t in texts] + [json.dumps(t) for t in texts]
    texts += [json.dumps(t, ensure_ascii=False) for t in texts]
    windows = {t.encode()[i : i + PIECE] for t in texts for i in range(len(t.encode()) - PIECE + 1)}
    windows |= {w.encode() for w in _stable_base64(data)}
    return frozenset(w.lower() for w in windows if len(w) == PIECE)


FORBIDDEN = forbidden(KEY)


def leaked(content: bytes, pieces: frozenset[bytes] = FORBIDDEN) -> list[str]:
    """The pieces of the secret found in `content` (case ignored)."""
    low = content.lower()
    found = {
        low[i : i + PIECE] for i in range(len(low) - PIECE + 1) if low[i : i + PIECE] in pieces
    }
    return sorted(w.decode(errors="replace") for w in found)


def redactor(secret: str = KEY) -> Redactor:
    return Redactor([Secret(KEY_ENV, secret)])


# --- the scan finds what it looks for ----------------------------------------------------


@pytest.mark.parametrize("form", sorted(emitted(KEY)))
def test_the_scan_finds_each_form_unredacted(form: str) -> None:
    text = emitted(KEY)[form]
    assert leaked(f"before {text} after".encode()), form
    assert leaked(html.escape(json.dumps({"v": text})).encode()), form
    assert leaked(text[PIECE:].encode()), f"{form}: a piece is found, not only the whole"


def test_the_scan_finds_no_piece_in_other_text() -> None:
    assert leaked(b"sk-live_ and some ordinary text, " * 100) == []
    assert leaked(base64.b64encode(os.urandom(4000))) == []


# --- the redactor: every form -----------------------------------------------------------


@pytest.mark.parametrize("form", sorted(emitted(KEY)))
def test_each_form_is_redacted(form: str) -> None:
    text = f"Authorization: {emitted(KEY)[form]}; fetched 2026-12-03"
    redacted = redactor().text(text)
    assert MARKER in redacted
    assert leaked(redacted.encode()) == []
    assert redacted.startswith("Authorization: ")
    assert redacted.endswith("fetched 2026-12-03")


def test_each_form_is_redacted_inside_json_text() -> None:
    text = json.dumps({"forms": emitted(KEY)})
    for spelled in (text, json.dumps(text), json.dumps(text, ensure_ascii=False)):
        redacted = redactor().text(spelled)
        assert redacted.count(MARKER) == len(emitted(KEY)), spelled[:80]
        assert leaked(redacted.encode()) == []


def test_a_secret_in_base64_at_each_alignment_leaves_only_bits_it_shares() -> None:
    data = KEY.encode()
    for before in range(6):
        text = base64.b64encode(os.urandom(before) + data + os.urandom(5)).decode()
        head, marker, tail = redactor().text(text).partition(MARKER)
        assert marker
        assert text.startswith(head)
        assert text.endswith(tail)
        # left: the characters of what surrounds it, and one at each end it shares bits with
        assert len(head) <= -(-4 * before // 3)
        assert len(tail) <= 1 + -(-4 * 5 // 3) + 2  # and the padding


secrets_st = st.text(st.characters(codec="utf-8"), min_size=4, max_size=40).filter(
    lambda s: s.strip() == s and bool(s)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secret=secrets_st, form=st.sampled_from(sorted(emitted("abcd"))), pad=st.text(max_size=8))
def test_no_form_of_any_secret_is_left(secret: str, form: str, pad: str) -> None:
    r = redactor(secret)
    text = f"{pad}<{emitted(secret)[form]}>{pad}"
    redacted = r.text(text)
    assert MARKER in redacted, (form, text)
    if len(secret.encode()) >= 2 * PIECE:
        assert leaked(redacted.encode(), forbidden(secret)) == [], (form, text)


def test_redaction_ignores_what_is_not_a_secret() -> None:
    r = redactor()
    text = "Plain text, 0123456789abcdef, SGVsbG8gd29ybGQ=, %41%42 and \\u0041: " * 20
    assert r.text(text) == text
    assert r.value({"n": 12, "t": text, "b": b"\xff"}) == {"n": 12, "t": text, "b": b"\xff"}


def test_a_number_that_spells_a_secret_and_undecodable_bytes_are_redacted() -> None:
    r = Redactor([Secret("PIN", "90210431")])
    assert r.value({"pin": 990210431, "n": 7}) == {"pin": "9[redacted:PIN]", "n": 7}
    assert r.value(b"\xff 90210431") == b"\xff [redacted:PIN]"


# --- redaction before any preview or cut -------------------------------------------------


class Holder:
    """An object whose repr carries the secret (a client, a credentials object)."""

    def __repr__(self) -> str:
        return f"Holder(token={KEY!r}, scope='read')"


PREVIEWED: dict[str, Any] = {
    "a dict with a date": {"auth": KEY, "fetched": datetime.date(2026, 12, 3)},
    "a string over the limit": "x" * 150 + KEY + "y" * 1_000_000,
    "bytes over the limit": b"x" * 150 + KEY.encode() + b"y" * 4_000_000,
    "bytes that are not UTF-8": b"\xff\xfe" + KEY.encode(),
    "a set": {KEY},
    "an object's repr": Holder(),
    "a tuple of objects": (Holder(), datetime.date(2026, 12, 3)),
    "base64 in a dict with a date": {
        "basic": base64.b64encode(b"user:" + KEY.encode()).decode(),
        "at": datetime.date(2026, 12, 3),
    },
    "hex in a set": {KEY.encode().hex().upper()},
    "keys over the size limit": {f"{KEY}{'z' * 120}{i}": i for i in range(8_000)},
}


@pytest.mark.parametrize("what", sorted(PREVIEWED))
def test_a_value_kept_as_a_preview_holds_no_piece_of_a_secret(what: str) -> None:
    kept = jsonable(PREVIEWED[what], redactor())
    assert isinstance(kept, str)
    assert kept.startswith(NOT_KEPT)
    assert len(kept) <= len(NOT_KEPT) + 2 * PREVIEW_CHARS
    assert leaked(json.dumps(kept).encode()) == [], kept
    assert leaked(kept.encode()) == [], kept


def test_a_model_name_is_cut_only_once_it_is_redacted() -> None:
    usage = ModelUsage(response_model="gateway/" + "x" * 150 + KEY, response_id=KEY * 3)
    cut = call_usage(None, usage, 5, redactor())
    assert cut.response_model is not None
    assert cut.response_model.startswith("gateway/xxx")
    assert len(cut.response_model) <= MAX_NAME_CHARS
    assert cut.response_id == MARKER * 3
    assert leaked(json.dumps([cut.response_model, cut.response_id]).encode()) == []
