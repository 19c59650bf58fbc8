"""The workloads of bench/persistence.py, generated before any timing and
deterministically (fixed seeds): realistic turns, one streaming turn, a log cut inside
an open turn."""

from __future__ import annotations

import math
import random
from typing import Any

import orjson

from bench.common import CWD, VOCABULARY
from session.events import EventType

Item = tuple[EventType, dict[str, Any]]

CHUNKS_STEP1 = 50
CHUNKS_STEP2 = 20
CALLS_PER_TURN = 2
EVENTS_PER_TURN = 2 + 1 + CHUNKS_STEP1 + 1 + 2 * CALLS_PER_TURN + 1 + 1 + CHUNKS_STEP2 + 1 + 1 + 1
BIG_RESULT_BYTES = (2_048, 8_192)  # multi-KB tool results: uniform in this range
SMALL_RESULT_BYTES = (40, 200)


# Workload generation (outside every timed region).


class Corpus:
    """A deterministic block of code-like text; slices of it are chunk and result text."""

    def __init__(self, seed: int, size: int = 1 << 17) -> None:
        rng = random.Random(seed)
        words = VOCABULARY.split()
        lines: list[str] = []
        total = 0
        while total < size:
            indent = "    " * rng.randint(0, 3)
            line = indent + " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
            if rng.random() < 0.2:
                line += ' = "' + rng.choice(words) + '"'
            lines.append(line)
            total += len(line) + 1
        self.text = "\n".join(lines)
        self.rng = rng

    def slice(self, low: int, high: int) -> str:
        length = self.rng.randint(low, high)
        start = self.rng.randrange(0, len(self.text) - length)
        return self.text[start : start + length]


def realistic_turn(turn: int, corpus: Corpus, big: tuple[bool, ...]) -> list[Item]:
    """One agent turn: prompt, a step that streams ~50 chunks and makes 2 tool calls, then
    a step of ~20 chunks that answers. `big[k]` makes the k-th tool result multi-KB."""
    items: list[Item] = [
        ("turn/start", {"turn": turn, "trigger": {"kind": "prompt"}, "mode": "code"}),
        (
            "user/message",
            {"turn": turn, "content": [{"type": "text", "text": corpus.slice(20, 300)}]},
        ),
    ]
    for step, n_chunks, calls in ((1, CHUNKS_STEP1, CALLS_PER_TURN), (2, CHUNKS_STEP2, 0)):
        items.append(("step/start", {"turn": turn, "step": step}))
        texts = [corpus.slice(4, 40) for _ in range(n_chunks)]
        for text in texts:
            items.append(
                (
                    "assistant/chunk",
                    {"turn": turn, "step": step, "chunk": {"type": "text", "text": text}},
                )
            )
        call_ids = [f"toolu_{turn:06d}_{k}" for k in range(calls)]
        paths = [f"src/module_{turn % 97}/file_{k}.py" for k in range(calls)]
        content: list[dict[str, Any]] = [{"type": "text", "text": "".join(texts)}]
        for call_id, path in zip(call_ids, paths, strict=True):
            content.append(
                {
                    "type": "tool-call",
                    "id": call_id,
                    "name": "read_file",
                    "arguments": orjson.dumps({"path": path}).decode(),
                }
            )
        usage = {
            "inputTokens": 1_000 + 37 * turn,
            "outputTokens": 12 * n_chunks,
            "cacheReadTokens": 900,
        }
        items.append(
            ("assistant/message", {"turn": turn, "step": step, "content": content, "usage": usage})
        )
        for k, (call_id, path) in enumerate(zip(call_ids, paths, strict=True)):
            items.append(
                (
                    "tool/call",
                    {
                        "turn": turn,
                        "step": step,
                        "callId": call_id,
                        "name": "read_file",
                        "arguments": {"path": path},
                        "title": f"Read {path}",
                        "kind": "read",
                        "locations": [{"path": f"{CWD}/{path}"}],
                    },
                )
            )
            size = BIG_RESULT_BYTES if big[k] else SMALL_RESULT_BYTES
            items.append(
                (
                    "tool/result",
                    {
                        "turn": turn,
                        "step": step,
                        "callId": call_id,
                        "content": [{"type": "text", "text": corpus.slice(*size)}],
                        "isError": False,
                    },
                )
            )
        items.append(("step/end", {"turn": turn, "step": step}))
    items.append(("turn/end", {"turn": turn, "reason": {"kind": "completed"}}))
    assert len(items) == EVENTS_PER_TURN
    return items


def realistic_items(events: int, big_results: int, seed: int = 1) -> list[Item]:
    """At least `events` events of realistic turns; `big_results` of the tool results
    (spread evenly) carry multi-KB content, the others a short text."""
    corpus = Corpus(seed)
    turns = max(1, math.ceil(events / EVENTS_PER_TURN))
    total = turns * CALLS_PER_TURN
    big_results = min(big_results, total)
    # Result i is big when the running share of big results steps up at i.
    flags = [(i + 1) * big_results // total > i * big_results // total for i in range(total)]
    items: list[Item] = []
    for turn in range(1, turns + 1):
        start = (turn - 1) * CALLS_PER_TURN
        items.extend(realistic_turn(turn, corpus, tuple(flags[start : start + CALLS_PER_TURN])))
    return items


def streaming_items(events: int, seed: int = 2) -> list[Item]:
    """One turn, one step, `events - 6` chunks, a message holding their text."""
    corpus = Corpus(seed)
    texts = [corpus.slice(4, 40) for _ in range(max(1, events - 6))]
    items: list[Item] = [
        ("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}}),
        ("user/message", {"turn": 1, "content": [{"type": "text", "text": "write a long essay"}]}),
        ("step/start", {"turn": 1, "step": 1}),
    ]
    items.extend(
        ("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text", "text": t}})
        for t in texts
    )
    items.append(
        (
            "assistant/message",
            {
                "turn": 1,
                "step": 1,
                "content": [{"type": "text", "text": "".join(texts)}],
                "usage": {"inputTokens": 50, "outputTokens": len(texts)},
            },
        )
    )
    items.append(("step/end", {"turn": 1, "step": 1}))
    items.append(("turn/end", {"turn": 1, "reason": {"kind": "completed"}}))
    return items


def open_turn_items(items: list[Item]) -> list[Item]:
    """`items` with its last turn cut right after its first `tool/call`: the log ends
    inside a step with one started and one unstarted call, so load must repair it."""
    last_start = max(i for i, (etype, _) in enumerate(items) if etype == "turn/start")
    first_call = next(i for i in range(last_start, len(items)) if items[i][0] == "tool/call")
    return items[: first_call + 1]
