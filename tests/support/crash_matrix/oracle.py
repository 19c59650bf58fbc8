"""What one kill point did and left, and the checks on it: an independent reading of
the stored log (JSONL lines / SQLite rows, torn tail and all), the log the kill left
(phase A) and the final log (phase C)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from session import Event, check_invariants, derive_messages
from session.transcript import unanswered_calls
from tests.support.logs import closers_of

from .scenarios import KillPoint, Scenario

Raw = bytes | list[tuple[int, str, int, bytes]]  # JSONL file bytes | SQLite rows


@dataclass
class Run:
    """One kill point: what A did, what the store held, what went wrong."""

    index: int
    point: KillPoint
    work: Path
    sid: str = ""
    answers: dict[int, dict[str, Any]] = field(default_factory=dict)  # turn -> response
    updates_at_answer: dict[int, int] = field(default_factory=dict)  # turn -> live updates before it
    snapshots: dict[int, Raw] = field(default_factory=dict)  # turn -> raw log when its answer arrived
    live_updates: list[dict[str, Any]] = field(default_factory=list)
    client_requests: list[dict[str, Any]] = field(default_factory=list)
    side_effects_seen: list[str] = field(default_factory=list)  # files changed/created by A
    returncode: int | None = None
    pre_raw: Raw = b""
    pre_events: list[Event] = field(default_factory=list)
    pre_good: Raw = b""  # pre_raw without a torn tail
    torn: bool = False
    loaded_over_wire: bool = False
    loaded_in_process: bool = False
    load_meta: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    # through `acp-bridge wrap` (crash_matrix/wrap.py): which process was killed, the
    # prompt pending at a child kill, the turns the child's death cut, the prompt after
    target: str = ""
    cut_prompt: int | None = None
    cut_turns: list[int] = field(default_factory=list)
    after_kill_turn: int | None = None

    def fail(self, message: str) -> None:
        self.failures.append(f"[{self.index} {self.point.label()} {self.sid}] {message}")

    @property
    def interrupted_turn(self) -> int | None:
        closers = closers_of(self.pre_events)
        return int(closers[-1]["data"]["turn"]) if closers else None


def read_raw(backend: str, store: Path, sid: str) -> Raw:
    """The stored log as bytes (JSONL) or rows (SQLite), read without taking the lock."""
    if backend == "jsonl":
        return (store / "sessions" / f"{sid}.jsonl").read_bytes()
    db = sqlite3.connect(f"file:{store / 'sessions.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute("SELECT seq, type, time, data FROM events WHERE session_id = ? ORDER BY seq",
                          (sid,)).fetchall()
    finally:
        db.close()
    out = [(int(seq), str(t), int(tm), bytes(d) if not isinstance(d, str) else d.encode()) for seq, t, tm, d in rows]
    return out + _tail_rows(store / "tails" / f"{sid}.jsonl", len(out))


def _tail_rows(path: Path, after: int) -> list[tuple[int, str, int, bytes]]:
    """The SQLite store's streamed events not yet made durable: the session's tail file,
    JSONL lines that go on from the rows (lines of seqs the rows hold are skipped). A
    line that is cut off or does not parse stands as a row no event has (torn)."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return []
    out: list[tuple[int, str, int, bytes]] = []
    *lines, cut_off = text.split(b"\n")
    for line in lines:
        try:
            event = orjson.loads(line)
            data = line[line.index(b'"data":') + len(b'"data":'):-1]
            row = (int(event["seq"]), str(event["type"]), int(event["time"]), data)
        except (ValueError, KeyError, TypeError):
            return [*out, (-1, "torn", 0, b"")]
        if row[0] >= after:
            out.append(row)
    return [*out, (-1, "torn", 0, b"")] if cut_off else out


def parse_raw(raw: Raw) -> tuple[list[Event], Raw, bool]:
    """(events, the raw log without a torn tail, torn?) - an independent reading of
    the stored format: complete lines (rows) that parse as events in seq order."""
    events: list[Event] = []
    if isinstance(raw, bytes):
        end = raw.find(b"\n") + 1  # after the header
        good = end
        torn = False
        while good < len(raw):
            nl = raw.find(b"\n", good)
            if nl < 0:
                torn = True
                break
            try:
                event = orjson.loads(raw[good:nl])
            except orjson.JSONDecodeError:
                torn = True
                break
            if not isinstance(event, dict) or event.get("seq") != len(events):
                torn = True
                break
            events.append(cast(Event, event))
            good = nl + 1
        return events, raw[:good], torn
    rows = list(raw)
    for i, (seq, etype, stamp, data) in enumerate(rows):
        if seq != i:
            return events, rows[:i], True
        try:
            events.append(cast(Event, {"type": etype, "seq": seq, "time": stamp, "data": orjson.loads(data)}))
        except orjson.JSONDecodeError:
            return events, rows[:i], True
    return events, rows, False


def prefix_through_turn(raw: Raw, events: list[Event], turn: int) -> Raw | None:
    """The raw log up to and including `turn`'s `turn/end` (None if it has none)."""
    idx = next((i for i, e in enumerate(events) if e["type"] == "turn/end" and e["data"]["turn"] == turn), None)
    if idx is None:
        return None
    if isinstance(raw, bytes):
        pos = raw.find(b"\n") + 1
        for _ in range(idx + 1):
            pos = raw.find(b"\n", pos) + 1
        return raw[:pos]
    return list(raw)[: idx + 1]


def is_prefix(prefix: Raw, whole: Raw) -> bool:
    if isinstance(prefix, bytes) and isinstance(whole, bytes):
        return whole.startswith(prefix)
    if isinstance(prefix, list) and isinstance(whole, list):
        return whole[: len(prefix)] == prefix
    return False


STOP_REASONS = {"completed": "end_turn", "max_tokens": "max_tokens", "max_steps": "max_turn_requests",
                "refusal": "refusal", "cancelled": "cancelled", "interrupted": "cancelled"}


# Our usage names -> ACP's (PromptResponse.usage), for the ones the models here count.
ACP_USAGE = {"inputTokens": "inputTokens", "outputTokens": "outputTokens", "cacheReadTokens": "cachedReadTokens",
             "cacheWriteTokens": "cachedWriteTokens", "reasoningTokens": "thoughtTokens"}


def stored_usage(events: list[Event], turn: int) -> dict[str, int] | None:
    """The `usage` an answer of `turn` must carry: its assistant messages' usage as
    stored, summed (None when it recorded none)."""
    total: dict[str, int] = {}
    for event in events:
        data = event["data"]
        if event["type"] == "assistant/message" and data["turn"] == turn:
            for name, count in (data.get("usage") or {}).items():
                if name in ACP_USAGE:
                    total[ACP_USAGE[name]] = total.get(ACP_USAGE[name], 0) + count
    if not total:
        return None
    return {"totalTokens": sum(v for k, v in total.items() if k != "thoughtTokens"),
            "inputTokens": 0, "outputTokens": 0, **total}


def check_settlement(run: Run, turn: int, response: dict[str, Any], end: Event | None) -> None:
    """An answered turn is durable, and its answer is the settlement of its turn/end
    (its usage that of the turn as stored)."""
    if end is None:
        run.fail(f"turn {turn} was answered ({response}) but has no turn/end on disk after the kill")
        return
    why = end["data"]["reason"]
    if "result" in response:
        expected: dict[str, Any] = {"stopReason": STOP_REASONS.get(why["kind"])}
        usage = stored_usage(run.pre_events, turn)
        if usage is not None:
            expected["usage"] = usage
        expected["_meta"] = {"acpBridge": {"turn": turn, "reason": why}}
        if response["result"] != expected:
            run.fail(f"turn {turn} answered {response['result']}, its turn/end says {why}")
    else:
        data = response["error"].get("data") or {}
        if why["kind"] != "error" or data.get("turn") != turn or data.get("step") != why.get("step"):
            run.fail(f"turn {turn} answered error {response['error']}, its turn/end says {why}")


def check_phase_a(run: Run, scenario: Scenario) -> None:
    events = run.pre_events
    try:
        check_invariants(events)
    except Exception as exc:
        run.fail(f"the log left by the kill breaks the invariants: {exc}")
    ends = {e["data"]["turn"]: e for e in events if e["type"] == "turn/end"}
    for turn, response in sorted(run.answers.items()):
        check_settlement(run, turn, response, ends.get(turn))
        prefix = prefix_through_turn(run.pre_good, events, turn)
        snap = run.snapshots.get(turn)
        if snap is not None and prefix is not None:
            snap_prefix = prefix_through_turn(snap, parse_raw(snap)[0], turn)
            if snap_prefix != prefix:
                run.fail(f"turn {turn} changed on disk between its answer and the kill")
    calls = {e["data"]["callId"] for e in events if e["type"] == "tool/call"}
    for request in run.client_requests:
        call_id = (request.get("params") or {}).get("toolCall", {}).get("toolCallId")
        if call_id is not None and call_id not in calls:
            run.fail(f"{request['method']} for {call_id} reached the client before its tool/call was on disk")
    effects = dict(scenario.side_effects)
    for name in run.side_effects_seen:
        if name in scenario.never:
            run.fail(f"{name} was written although its permission was refused")
        elif name in effects and effects[name] not in calls:
            run.fail(f"{name} changed although the tool/call of {effects[name]} is not on disk")


def check_final(run: Run, final_raw: Raw, final_events: list[Event]) -> None:
    """The final log against the log the kill left (independent of the agent's code
    except for the pure closers function the contract names)."""
    try:
        check_invariants(final_events, closed=True)
    except Exception as exc:
        run.fail(f"the final log breaks the invariants: {exc}")
    if unanswered_calls(derive_messages(final_events)):
        run.fail("the final model transcript has unanswered tool calls")
    if not is_prefix(run.pre_good, final_raw):
        run.fail("what was on disk before the load is not kept byte for byte (JSONL lines / SQLite rows)")
    pre = run.pre_events
    closers = closers_of(pre)
    if final_events[: len(pre)] != pre:
        run.fail("the events before the load changed")
    got = final_events[len(pre) : len(pre) + len(closers)]
    if got != closers:
        run.fail(f"the interrupted turn was closed with {got}, expected {closers}")
    if closers and closers[-1]["data"]["reason"] != {"kind": "interrupted", "cause": "crash"}:
        run.fail(f"the interrupted turn ends {closers[-1]}")
    rest = final_events[len(pre) + len(closers) :]
    next_turn = max((e["data"]["turn"] for e in pre if e["type"] == "turn/start"), default=0) + 1
    if not rest or rest[0]["type"] != "turn/start" or rest[0]["data"]["turn"] != next_turn \
            or rest[-1]["type"] != "turn/end" or rest[-1]["data"]["reason"] != {"kind": "completed"} \
            or any(e["type"] == "turn/start" for e in rest[1:]):
        run.fail(f"after the repair the log should hold exactly turn {next_turn} (completed): {rest[:1]}..{rest[-1:]}")
    for turn in run.answers:
        prefix = prefix_through_turn(run.pre_good, pre, turn)
        if prefix is not None and not is_prefix(prefix, final_raw):
            run.fail(f"answered turn {turn} is not byte-identical after the repair")
