"""A small store for the search and stats tests (tests/test_sessions_search.py,
tests/test_sessions_stats.py), written through `SessionStore` as an agent writes it
(a store clock, so turns have known times), on any backend:

    ours     our agent's session in `cwd_a`, model openai:gpt-4o, day 0:
             turn 1 completed (prompt, thinking, answer), turn 2 failed (a tool call
             and its output, a second step that errs)
    wrapped  a wrapped agent's (claude-code) in `cwd_b`, model claude-code, day 1:
             turn 1 cancelled (its agent said it cost 0.25 USD so far), turn 2 left
             open on disk (its owner gone: interrupted, not yet repaired)

The words each text holds are in WORDS, so a test searches for them by name.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from session import SessionStore, open_backend
from tests.support.logs import Script

DAY0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
DAY1 = DAY0 + 86_400_000
WORDS = {
    "prompt": "quokka",  # ours, turn 1's prompt
    "thought": "pangolin",  # ours, turn 1's thinking
    "answer": "axolotl",  # ours, turn 1's answer
    "tool": "narwhal.txt",  # ours, turn 2's tool call (its path)
    "output": "ZeroDivisionError",  # ours, turn 2's tool output
    "cancelled": "wombat",  # wrapped, turn 1's prompt
    "open": "capybara",  # wrapped, turn 2's prompt and streamed answer
}
USAGE_OURS = [{"inputTokens": 1000, "outputTokens": 200, "cacheReadTokens": 400, "reasoningTokens": 50},
              {"inputTokens": 1500, "outputTokens": 100}, {"inputTokens": 1700, "outputTokens": 30}]
USAGE_WRAPPED = [{"inputTokens": 300, "outputTokens": 40}, {"inputTokens": 500, "outputTokens": 60}]


@dataclass
class Stored:
    ours: str
    wrapped: str
    cwd_a: str
    cwd_b: str


def _msg(script: Script, text: str, usage: dict[str, int], calls: list[dict[str, Any]] | None = None,
         thinking: str = "") -> None:
    content: list[dict[str, Any]] = [{"type": "reasoning", "text": thinking}] if thinking else []
    content += [{"type": "text", "text": text}] if text else []
    content += calls or []
    script.add("assistant/message", {"turn": script.turn, "step": script.step, "content": content,
                                     "usage": usage})


def ours_script(model: str = "openai:gpt-4o") -> Script:
    s = Script()
    s.start_turn(f"please look at the {WORDS['prompt']} timeout")
    s.start_step().chunk(f"I should think about the {WORDS['thought']}", "reasoning")
    s.chunk(f"The {WORDS['answer']} timeout is fixed.")
    _msg(s, f"The {WORDS['answer']} timeout is fixed.", USAGE_OURS[0],
         thinking=f"I should think about the {WORDS['thought']}")
    s.end_step().end_turn()
    s.start_turn("now read the file")
    s.start_step()
    _msg(s, "Reading.", USAGE_OURS[1], [{"type": "tool-call", "id": "c1", "name": "read_file",
                                          "arguments": orjson.dumps({"path": WORDS["tool"]}).decode()}])
    s.add("tool/call", {"turn": 2, "step": 1, "callId": "c1", "name": "read_file",
                        "arguments": {"path": WORDS["tool"]}, "title": f"Read {WORDS['tool']}", "kind": "read"})
    s.add("tool/result", {"turn": 2, "step": 1, "callId": "c1", "isError": True,
                          "content": [{"type": "text", "text": f"Traceback: {WORDS['output']} in compute"}]})
    s.end_step().start_step()
    _msg(s, "", USAGE_OURS[2])
    s.end_step()
    s.end_turn("error", step=2, message="rate limited", code="rate_limit", retryable=True)
    for etype, data in s.items:
        if etype == "turn/start":
            data["model"] = model
    return s


def wrapped_script() -> Script:
    s = Script()
    s.start_turn(f"{WORDS['cancelled']} again, the timeout")
    s.items[0][1]["model"] = "claude-code"
    s.start_step().chunk("slow words")
    s.add("wrapped/update", {"turn": 1, "update": {"sessionUpdate": "usage_update", "used": 340, "size": 200_000,
                                                   "cost": {"amount": 0.25, "currency": "USD"}}})
    s.add("assistant/message", {"turn": 1, "step": 1, "content": [{"type": "text", "text": "slow words"}],
                                "usage": USAGE_WRAPPED[0], "silent": True})
    s.end_step().end_turn("cancelled", by="session/cancel")
    s.start_turn(f"and the {WORDS['open']}")
    s.items[-2][1]["model"] = "claude-code"
    s.start_step().chunk(f"looking for the {WORDS['open']}")
    s.add("assistant/message", {"turn": 2, "step": 1, "content": [{"type": "text", "text": f"the {WORDS['open']}"}],
                                "usage": USAGE_WRAPPED[1], "silent": True})
    return s


def write_store(root: Path | str, backend: str, base: Path) -> Stored:
    """The two sessions, in `root` (a DSN for postgres), cwds made under `base`."""
    cwd_a, cwd_b = base / "work-a", base / "work-b"
    cwd_a.mkdir(parents=True, exist_ok=True)
    cwd_b.mkdir(parents=True, exist_ok=True)
    ours = add_session(root, backend, str(cwd_a), ours_script(), DAY0)
    wrapped = add_session(root, backend, str(cwd_b), wrapped_script(), DAY1,
                          wrapped={"command": ["claude-code-acp"], "agentInfo": {"name": "claude-code",
                                                                                 "version": "1.0"}})
    return Stored(ours, wrapped, str(cwd_a), str(cwd_b))


def add_session(root: Path | str, backend: str, cwd: str, script: Script, base_ms: int, *,
                wrapped: dict[str, Any] | None = None,
                session_id: str | None = None) -> str:
    store = SessionStore(open_backend(backend, root), clock=itertools.count(base_ms, 10).__next__)
    try:
        log = store.create(cwd=cwd, wrapped=wrapped, session_id=session_id)  # type: ignore[arg-type]
        log.extend(script.items)
        log.sync()
        sid = log.id
        log.close()  # an open last turn stays open on disk, its owner gone
    finally:
        store.close()
    return sid


def append_turn(root: Path | str, backend: str, sid: str, prompt: str, answer: str, base_ms: int) -> None:
    """One more completed turn on a stored session (a load, as an agent resuming it)."""
    store = SessionStore(open_backend(backend, root), clock=itertools.count(base_ms, 10).__next__)
    try:
        log = store.load(sid).log
        turn = max((e["data"].get("turn", 0) for e in log.events if e["type"] == "turn/end"), default=0)
        log.extend(Script(first_turn=turn + 1).text_turn(prompt, answer).items)
        log.sync()
        log.close()
    finally:
        store.close()
