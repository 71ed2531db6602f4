"""The key of a keyed hash chain: never in the journal, given by the environment or a file.

`FSM_AGENT_CHAIN_KEY` holds the key itself (its UTF-8 bytes); `FSM_AGENT_CHAIN_KEY_FILE`
names a file holding it (its bytes, a trailing newline dropped). A store opened with a key
writes new runs keyed (see `fsm_agent.journal.chain_hash`); `fsm-agent verify --key-file PATH`
checks with the key in PATH.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from fsm_agent.errors import InvalidInputError

KEY_ENV: Final = "FSM_AGENT_CHAIN_KEY"
KEY_FILE_ENV: Final = "FSM_AGENT_CHAIN_KEY_FILE"
#: Shorter keys could be guessed; 32 random bytes (64 hex digits) is what to use.
MIN_KEY_BYTES: Final = 16
MAKE_ONE: Final = "python3 -c 'import secrets; print(secrets.token_hex(32))'"


class ChainKeyError(InvalidInputError):
    """The chain key cannot be used: unreadable, empty or too short. Names where it came
    from (`source`)."""

    def __init__(self, message: str, *, source: str) -> None:
        self.source = source
        super().__init__(f"chain key from {source}: {message}")


def _checked(key: bytes, source: str) -> bytes:
    if len(key) < MIN_KEY_BYTES:
        raise ChainKeyError(
            f"{len(key)} bytes; a chain key needs at least {MIN_KEY_BYTES} (make one with"
            f" {MAKE_ONE})",
            source=source,
        )
    return key


def read_key_file(path: str | os.PathLike[str]) -> bytes:
    """The key held in a file (its bytes, one trailing newline dropped)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ChainKeyError(f"cannot read it ({exc.strerror or exc})", source=str(path)) from exc
    return _checked(data.removesuffix(b"\n").removesuffix(b"\r"), str(path))


def key_from_env(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The key the environment gives (`FSM_AGENT_CHAIN_KEY`, else the file
    `FSM_AGENT_CHAIN_KEY_FILE` names), or None: no key, unkeyed chains."""
    env = os.environ if environ is None else environ
    text = env.get(KEY_ENV)
    if text:
        return _checked(text.encode("utf-8", "surrogateescape"), f"${KEY_ENV}")
    path = env.get(KEY_FILE_ENV)
    if path:
        return read_key_file(path)
    return None
