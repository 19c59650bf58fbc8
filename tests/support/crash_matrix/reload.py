"""Phases B and C of the crash matrix: every killed session loaded again, over the
wire by one new agent (repair report, replay, one more prompt, close), then in-process
(the final log against the log the kill left)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from session import SessionStore, open_backend
from tests.support.acp_client import AgentProcess
from tests.support.logs import closers_of

from .kill import MatrixAgent
from .oracle import Run, check_final, read_raw
from .wrap import check_wrapped_replay

# --- phase B: load, replay, prompt --------------------------------------------------


async def run_b(runs: list[Run], backend: str, store: Path, scripts: Path) -> None:
    """One new agent loads every killed session, checks, prompts once more, closes."""
    live = [r for r in runs if r.sid]
    script = scripts / "b.json"
    script.write_bytes(orjson.dumps({"steps": [{"text": "back after the crash"}] * len(live)}))
    await load_every_run(lambda: MatrixAgent(store, model=f"script:{script}", backend=backend), live, "agent B")


async def load_every_run(agent_of: Callable[[], AgentProcess], live: list[Run], who: str, *,
                         wrapped: bool = False) -> None:
    """Phase B's drive, by our agent or by the wrapper (`who` names it): one new process
    loads every live run's session; what goes wrong fails every run."""
    try:
        async with agent_of() as agent:
            await agent.initialize()
            for run in live:
                await _load_one(agent, run, wrapped=wrapped)
        if agent.returncode != 0:
            for run in live:
                run.fail(f"{who} exited with {agent.returncode}: {agent.stderr[-2000:]!r}")
    except Exception as exc:
        for run in live:
            run.fail(f"driving {who} failed: {type(exc).__name__}: {exc}")


async def _load_one(agent: AgentProcess, run: Run, *, wrapped: bool = False) -> None:
    params = {"sessionId": run.sid, "cwd": str(run.work), "mcpServers": []}
    response = await agent.request_raw("session/load", params, timeout=30)
    if "error" in response:
        run.fail(f"session/load failed: {response['error']}")
        return
    run.loaded_over_wire = True
    meta = run.load_meta = response["result"]["_meta"]["acpBridge"]
    closers = closers_of(run.pre_events)
    repair = meta["repair"]
    expected = {"interruptedTurn": run.interrupted_turn, "closers": len(closers),
                "syntheticResults": sum(1 for c in closers if c["type"] == "tool/result"),
                "repaired": bool(closers) or run.torn}
    got = {k: repair.get(k) for k in expected}
    if got != expected:
        run.fail(f"load repair report {repair}, expected {expected}")
    replay = agent.updates_of(run.sid)
    users = {u.get("messageId") for u in replay if u["sessionUpdate"] == "user_message_chunk"}
    turns = {e["data"]["turn"] for e in run.pre_events if e["type"] == "user/message"}
    missing = sorted(t for t in turns if f"t{t}-user" not in users)
    if missing:
        run.fail(f"the replay lacks the prompts of turns {missing}")
    if wrapped:  # the wrapper's replay carries its own messageIds and statuses: by text
        check_wrapped_replay(run, replay)
    else:
        if run.answers:
            last = max(run.answers)
            live = run.live_updates[: run.updates_at_answer[last]]
            replayed = [u for u in replay if u["sessionUpdate"] != "user_message_chunk"]
            if replayed[: len(live)] != live:
                first = next((i for i, (a, b) in enumerate(zip(live, replayed, strict=False)) if a != b),
                             min(len(live), len(replayed)))
                run.fail(f"the replay differs from the live stream of the answered turns at update {first}: "
                         f"live {live[first] if first < len(live) else None}, "
                         f"replay {replayed[first] if first < len(replayed) else None}")
        # Log before send: the text of every message shown live, the turn cut by the kill
        # included, is on disk, so it starts the replay of that message.
        shown, back = streamed_text(run.live_updates), streamed_text(replay)
        for message_id, text in shown.items():
            if not back.get(message_id, "").startswith(text):
                run.fail(f"message {message_id}: the text shown before the kill is not a prefix of the replay: "
                         f"shown {len(text)} characters ...{text[-40:]!r}, replayed "
                         f"{len(back.get(message_id, ''))} ...{back.get(message_id, '')[-40:]!r}")
    if closers:
        failed = [u for u in replay if u["sessionUpdate"] in ("tool_call", "tool_call_update")
                  and u.get("status") == "failed"]
        synthetic = {c["data"]["callId"] for c in closers if c["type"] == "tool/result"}
        if not synthetic <= {u["toolCallId"] for u in failed}:
            run.fail(f"the replay does not fail the interrupted calls {sorted(synthetic)}")
    next_turn = max((e["data"]["turn"] for e in run.pre_events if e["type"] == "turn/start"), default=0) + 1
    answer = await agent.request_raw("session/prompt", {"sessionId": run.sid, "prompt": [
        {"type": "text", "text": "are you still there?"}]}, timeout=30)
    want = {"stopReason": "end_turn", "_meta": {"acpBridge": {"turn": next_turn, "reason": {"kind": "completed"}}}}
    if answer.get("result") != want:
        run.fail(f"the prompt after the load answered {answer}, expected {want}")
    closed = await agent.request_raw("session/close", {"sessionId": run.sid}, timeout=30)
    if closed.get("result") != {}:
        run.fail(f"session/close answered {closed}")


def streamed_text(updates: list[dict[str, Any]]) -> dict[str, str]:
    """messageId -> the text of its `agent_message_chunk` / `agent_thought_chunk`s."""
    out: dict[str, str] = {}
    for update in updates:
        if update["sessionUpdate"] in ("agent_message_chunk", "agent_thought_chunk"):
            key = str(update.get("messageId"))
            out[key] = out.get(key, "") + update["content"]["text"]
    return out


# --- phase C: the final log, in-process ----------------------------------------------


def run_c(runs: list[Run], backend: str, store: Path) -> None:
    b = open_backend(backend, store)
    try:
        store_ = SessionStore(b)
        for run in runs:
            if not run.sid:
                continue
            try:
                loaded = store_.load(run.sid)
            except Exception as exc:
                run.fail(f"the final log does not load in-process: {type(exc).__name__}: {exc}")
                continue
            try:
                run.loaded_in_process = True
                if loaded.report.repaired:
                    run.fail(f"the log needed a second repair: {loaded.report}")
                events = list(loaded.log.events)
            finally:
                loaded.log.close()
            check_final(run, read_raw(backend, store, run.sid), events)
    finally:
        b.close()
