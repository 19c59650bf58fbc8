"""Shared by the tests of a cancel and a permission answer read together, for our agent
(tests/test_e2e_permission_flow.py) and through the wrapper (tests/test_wrap_cancel.py):
the script that asks for permission once per round, the rounds of a cancel and the
answer sent in one write and what they must all leave, a prompt and its cancel sent in
one write, and the shape of one round's wire.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson

from tests.support.acp_client import AgentProcess, ClientPolicy, write_script


def permission_rounds_script(path: Path, rounds: int) -> str:
    """A `script:` model that writes a file (so asks for permission) once per round."""
    steps = [{"toolCalls": [{"id": f"w{n}", "name": "write_file",
                             "arguments": {"path": "out.txt", "content": "hi\n"}}]} for n in range(rounds)]
    return write_script(path, *steps)


def asked_times(policy: ClientPolicy, count: int) -> Callable[[], bool]:
    return lambda: len(policy.asked) == count


def cancel(by: str, sid: str, prompt_id: str) -> dict[str, Any]:
    """The client's cancel of a prompt: `session/cancel` of its session, or
    `$/cancel_request` of its request id."""
    return {"jsonrpc": "2.0", "method": by,
            "params": {"sessionId": sid} if by == "session/cancel" else {"requestId": prompt_id}}


async def cancel_with_the_answer(client: AgentProcess, sid: str, n: int, by: str, *,
                                 cancel_first: bool, allow: bool = False) -> None:
    """Round n (prompt id `prompt-{n}`): the cancel and the answer to the round's
    permission request, in one write, in the order asked; the answer is `cancelled`, or
    with `allow` the request's `allow_once` option (an answer that would let it run)."""
    (asked,) = [m for d, m in client.transcript if d == "<-"
                and m.get("method") == "session/request_permission"][n:]
    allow_once = [o["optionId"] for o in asked["params"]["options"] if o["kind"] == "allow_once"]
    outcome = {"outcome": "selected", "optionId": allow_once[0]} if allow else {"outcome": "cancelled"}
    reply = {"jsonrpc": "2.0", "id": asked["id"], "result": {"outcome": outcome}}
    pair = [cancel(by, sid, f"prompt-{n}"), reply]
    if not cancel_first:
        pair.reverse()
    client.transcript.extend(("->", m) for m in pair)
    await client.send_raw(b"".join(orjson.dumps(m) + b"\n" for m in pair))  # one write


async def race_rounds(client: AgentProcess, policy: ClientPolicy, sid: str, count: int, by: str, *,
                      cancel_first: bool, allow_every_other: bool = False,
                      drop_meta: bool = False) -> list[list[Any]]:
    """`count` rounds of cancel_with_the_answer (with `allow_every_other`, odd rounds
    answer `allow_once`), each prompt answered `cancelled` by that cancel; each round's
    wire_shape."""
    rounds: list[list[Any]] = []
    for n in range(count):
        async with anyio.create_task_group() as tg:
            answer = client.prompt_soon(tg, sid, "write it", request_id=f"prompt-{n}")
            await client.wait_for(asked_times(policy, n + 1))
            start = len(client.transcript)
            await cancel_with_the_answer(client, sid, n, by, cancel_first=cancel_first,
                                         allow=allow_every_other and n % 2 == 1)
        assert answer["result"] == {"stopReason": "cancelled", "_meta": {"acpBridge": {
            "turn": n + 1, "reason": {"kind": "cancelled", "by": by}}}}, f"round {n}"
        rounds.append(wire_shape([m for d, m in client.transcript[start:] if d == "<-"], drop_meta=drop_meta))
    return rounds


def check_rounds_alike(rounds: list[list[Any]]) -> dict[str, Any]:
    """Every round left the same wire: the write failed before it ran, and no
    `$/cancel_request` went out for the request the client answered. The failed update."""
    first = rounds[0]
    assert {"method": "$/cancel_request"} not in first
    (failed,) = [u for u in first if u.get("status") == "failed"]
    assert failed["content"][0]["content"]["text"] == "The tool call was cancelled (before it ran)."
    assert [r for r in rounds if r != first] == [], first
    return dict(failed)


def check_cancelled_log(events: list[dict[str, Any]], count: int, by: str) -> None:
    """A log of `count` such rounds: every turn ended by the cancel, no permission recorded."""
    results = [e["data"] for e in events if e["type"] == "tool/result"]
    assert len(results) == count and not any("permission" in r for r in results)
    assert [e["data"]["reason"] for e in events if e["type"] == "turn/end"] == [
        {"kind": "cancelled", "by": by}] * count


async def prompt_and_cancel_in_one_write(client: AgentProcess, sid: str, by: str) -> dict[str, Any]:
    """A prompt (id `p`) and its cancel (by `by`) in one write; the prompt's answer."""
    prompt = {"jsonrpc": "2.0", "id": "p", "method": "session/prompt",
              "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "write it"}]}}
    client._requested["p"] = "session/prompt"  # its answer is schema-checked as a prompt's
    await client.send_raw(orjson.dumps(prompt) + b"\n" + orjson.dumps(cancel(by, sid, "p")) + b"\n")
    await client.wait_for(lambda: any(d == "<-" and m.get("id") == "p" for d, m in client.transcript))
    answers: list[dict[str, Any]] = [m for d, m in client.transcript if d == "<-" and m.get("id") == "p"]
    (answer,) = answers
    return answer


def wire_shape(messages: list[Any], *, drop_meta: bool = False) -> list[Any]:
    """What was sent to the client in one round, ids and per-turn values left out (with
    `drop_meta`, the updates' whole `_meta`; else only its turn number)."""
    shape: list[Any] = []
    for message in messages:
        if message.get("method") == "session/update":
            update = dict(message["params"]["update"])
            for varying in ("toolCallId", "rawInput", "messageId", *(("_meta",) if drop_meta else ())):
                update.pop(varying, None)
            update.get("_meta", {}).get("acpBridge", {}).pop("turn", None)
            shape.append(update)
        elif "method" in message:
            shape.append({"method": message["method"]})
        else:  # the prompt's answer: checked round by round
            shape.append({"answer": message.get("result", {}).get("stopReason")})
    return shape
