"""The workloads of bench/protocol.py (deterministic; generated outside every timed
region): the streaming prompt's text, and long sessions written through the store for
`session/load`."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bench import pg_store
from bench.common import CWD, FIXED_TIME, VOCABULARY
from session import SessionStore, open_backend
from session.events import EventType

Item = tuple[EventType, dict[str, Any]]

MB = 1_000_000
CHUNKS_PER_TURN = 50  # load fixtures: 25 chunks, a tool call and its result, then 25 chunks
EVENTS_PER_TURN = CHUNKS_PER_TURN + 11
RESULT_BYTES = 2_048  # tool result text in the load fixtures: uniform in [0.5x, 1.5x]


def stream_text(words: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    vocab = VOCABULARY.split()
    return " ".join(rng.choice(vocab) for _ in range(words))


class Pools:
    """Shared text objects for the load fixtures (a 500 MB log must not need GBs of
    distinct strings in the builder): code-like chunks of 4-40 characters and tool
    results of about `result_bytes`."""

    def __init__(self, result_bytes: int, seed: int = 7) -> None:
        rng = random.Random(seed)
        vocab = VOCABULARY.split()
        corpus = " ".join(rng.choice(vocab) for _ in range(60_000))
        self.chunks = [self._slice(rng, corpus, 4, 40) for _ in range(1_024)]
        high = max(16, result_bytes * 3 // 2)
        text = corpus
        while len(text) < high + 1:
            text += "\n" + corpus
        self.results = [self._slice(rng, text, max(8, result_bytes // 2), high) for _ in range(64)]
        self.rng = rng

    @staticmethod
    def _slice(rng: random.Random, text: str, low: int, high: int) -> str:
        length = rng.randint(low, high)
        start = rng.randrange(0, len(text) - length)
        return text[start : start + length]


def session_turns(turns: int, chunks_per_turn: int, pools: Pools) -> Iterator[list[Item]]:
    """Whole turns of a long session: prompt, a step of chunks that makes one tool call,
    its `tool/call` and `tool/result`, then a step of chunks that answers."""
    rng = random.Random(11)
    first = chunks_per_turn // 2
    for turn in range(1, turns + 1):
        items: list[Item] = [
            ("turn/start", {"turn": turn, "trigger": {"kind": "prompt"}, "mode": "ask", "model": "echo"}),
            ("user/message", {"turn": turn, "content": [{"type": "text", "text": pools.chunks[turn % 1024]}]}),
        ]
        for step, n_chunks in ((1, first), (2, chunks_per_turn - first)):
            items.append(("step/start", {"turn": turn, "step": step}))
            texts = [pools.chunks[rng.randrange(1024)] for _ in range(n_chunks)]
            items.extend(("assistant/chunk", {"turn": turn, "step": step,
                                              "chunk": {"type": "text", "text": t}}) for t in texts)
            content: list[dict[str, Any]] = [{"type": "text", "text": "".join(texts)}]
            call_id = f"call_{turn:07d}"
            path = f"src/module_{turn % 97}.py"
            if step == 1:
                content.append({"type": "tool-call", "id": call_id, "name": "read_file",
                                "arguments": orjson.dumps({"path": path}).decode()})
            usage = {"inputTokens": 1_000 + turn, "outputTokens": n_chunks}
            items.append(("assistant/message", {"turn": turn, "step": step, "content": content, "usage": usage}))
            if step == 1:
                items.append(("tool/call", {"turn": turn, "step": step, "callId": call_id, "name": "read_file",
                                            "arguments": {"path": path}, "title": f"Read {path}", "kind": "read",
                                            "locations": [{"path": f"{CWD}/{path}"}]}))
                result = pools.results[rng.randrange(len(pools.results))]
                items.append(("tool/result", {"turn": turn, "step": step, "callId": call_id,
                                              "content": [{"type": "text", "text": result}], "isError": False}))
            items.append(("step/end", {"turn": turn, "step": step}))
        items.append(("turn/end", {"turn": turn, "reason": {"kind": "completed"}}))
        yield items


def turn_bytes(chunks_per_turn: int, result_bytes: int, sample: int = 20) -> float:
    """The JSONL bytes of an average turn (for sizing the big log)."""
    pools = Pools(result_bytes)
    total = 0
    for items in session_turns(sample, chunks_per_turn, pools):
        for seq, (etype, data) in enumerate(items):
            total += len(orjson.dumps({"type": etype, "seq": 100_000 + seq, "time": FIXED_TIME,
                                       "data": data})) + 1
    return total / sample


def build_log(kind: str, root: Path, turns: int, chunks_per_turn: int, result_bytes: int) -> dict[str, Any]:
    """Write one long session through the store (`SessionStore.create`, one
    `SessionLog.extend` per turn: the batch form of `append`, one durability point per
    turn). Returns its id, event count and JSONL path/bytes (jsonl only)."""
    where = pg_store.location(kind, root, fresh=True)  # postgres: the folder's database
    backend = open_backend(kind, where)
    try:
        store = SessionStore(backend, clock=lambda: FIXED_TIME)
        log = store.create(cwd=CWD)
        pools = Pools(result_bytes)
        for items in session_turns(turns, chunks_per_turn, pools):
            log.extend(items)
        info: dict[str, Any] = {"id": log.id, "events": len(log.events), "turns": turns,
                                "chunks": turns * chunks_per_turn, "results": turns}
        log.close()
    finally:
        backend.close()
    if kind == "jsonl":
        path = root / "sessions" / f"{info['id']}.jsonl"
        info["path"] = str(path)
        info["bytes"] = path.stat().st_size
    elif kind == "postgres":
        with pg_store.server().admin() as db:
            info["bytes"] = db.execute("SELECT pg_database_size(%s)", (pg_store.name_of(root),)).fetchone()[0]
    else:
        info["bytes"] = (root / "sessions.sqlite3").stat().st_size
    return info
