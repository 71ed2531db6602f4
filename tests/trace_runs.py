"""Real runs for the trace tests: agent_loop with the lab's tools on a real SQLite journal,
driven by the real `openai:` adapter against the test model server (so each call journals
the tokens, models, id and finish reason a server sends)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fsm_agent import HaltRecord, load_tools, run
from fsm_agent.adapters.loading import load_model
from fsm_agent.adapters.openai import Endpoint
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.stores.sqlite import SqliteStore
from tests.model_server import Act, ModelServer

TASK = "Find the lab password"
LAB_TOOLS = "fsm_agent.examples.halt_lab.tools"


def reply(message: dict[str, Any], n: int, finish: str = "stop") -> Act:
    """A chat completion carrying `message`, with usage (10n prompt, n completion tokens),
    an id, the answering model's own name and a finish reason."""
    body = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "model": "test-model-2026-01",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", **message}}],
        "usage": {"prompt_tokens": 10 * n, "completion_tokens": n},
    }  # fmt: skip
    return Act(body=body)


def call(name: str, args: dict[str, Any], n: int) -> Act:
    function = {"name": name, "arguments": json.dumps(args)}
    message = {"content": None, "tool_calls": [{"id": f"call_{n}", "type": "function",
                                                "function": function}]}  # fmt: skip
    return reply(message, n, finish="tool_calls")


def answer(text: str, n: int) -> Act:
    return reply({"content": json.dumps({"answer": text})}, n)


#: A lab run that misses once, hits, and answers: 3 model calls, 2 tool calls.
LAB_ACTS = (
    call("lookup", {"q": "password"}, 1),
    call("lookup", {"q": "lab password"}, 2),
    answer("swordfish", 3),
)


def openai_run(
    tmp_path: Path, server: ModelServer, acts: tuple[Act, ...] = LAB_ACTS, **options: Any
) -> HaltRecord:
    """One lab run on the test server, journaled in tmp_path/j.db."""
    server.play(*acts)
    model = load_model("openai:test-model", endpoint=Endpoint(base_url=server.base_url))
    options.setdefault("store", tmp_path / "j.db")
    options.setdefault("handle_signals", False)
    return run(
        "agent_loop",
        task=TASK,
        model=model,
        tools=load_tools(LAB_TOOLS),
        allow=("lookup", "slow_lookup", "hang"),
        **options,
    )


def journaled(db: Path, run_id: str) -> tuple[RunRow, list[Event]]:
    store = SqliteStore(db)
    try:
        return store.get_run(run_id), store.events(run_id)
    finally:
        store.close()
