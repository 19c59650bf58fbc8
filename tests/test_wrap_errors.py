"""A wrapped agent's error answer to `session/prompt` reaches the editor as the agent
sent it (issue 23, point 2): its code, message and `data`, byte for byte, in its member
order, nothing added (no `"data": null` where it sent none), and the persisted
`turn/end` holds it (`reason.agentError`), so the answer settled from the log is the
same error again, after a `session/load` too (docs/protocol.md, "Settlement").

The child is tests/support/error_agent.py, a raw agent that answers each prompt with the
error object its prompt spells out, run behind the real wrapper on every durable backend.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.errors import TurnFailedError
from acp_bridge.host.engine import TurnEnd
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.prompts import answer_of
from tests.support.acp_client import AgentProcess
from tests.support.peers import stored_log, texts
from tests.support.wrapped import WrappedProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ERROR_AGENT = Path(__file__).resolve().parent / "support" / "error_agent.py"

# (what the child sends as its error object, what the editor must get: the same bytes
# unless the second member says otherwise).
VALID: list[bytes] = [
    b'{"code":-32000,"message":"Authentication required","data":{"authMethods":["api-key","login"]}}',
    b'{"code":-32000,"message":"authenticate first"}',
    b'{"code":-32002,"message":"agent says -32002","data":{"detail":"why"}}',
    b'{"code":-32602,"message":"bad params","data":[1,"two",{"three":3.5},null,true,false,-1.5e-7]}',
    b'{"code":-32603,"message":"Internal error","data":"Could not resolve authentication method. '
    b'Expected one of api_key, auth_token, or credentials"}',
    b'{"code":-32603,"message":"Internal error"}',
    b'{"code":-32800,"message":"Request cancelled","data":null}',
    b'{"code":-32099,"message":"custom","data":42}',
    b'{"code":-32099,"message":"custom","data":false}',
    b'{"code":-32099,"message":"custom","data":""}',
    b'{"code":-32099,"message":"custom","data":{}}',
    # An agent that settles as acp-bridge does: its prefix and its data are its own.
    b'{"code":-32603,"message":"turn failed: rate limited","data":{"turn":7,"step":2,"code":"rate_limit",'
    b'"retryable":true}}',
    # Its member order, and text that is not ASCII, as it sent them.
    '{"message":"ünïcødé ✓ order kept","data":{"b":1,"a":[]},"code":-32001}'.encode(),
    b'{"code":4242,"message":"outside the reserved range","data":{"code":"mine","retryable":false}}',
    b'{"code":-32099,"message":"a NUL \\u0000 inside","data":["\\u0000"]}',  # PostgreSQL text refuses NUL
]
# Not a JSON-RPC error object as it stands: what the editor gets instead, the same for
# a prompt as for any request the wrapper passes on (acp_bridge.rpc.protocol.error_object).
FIXED: list[tuple[bytes, bytes]] = [
    (b'{"code":-32603,"message":"x","data":1,"stack":"at foo"}', b'{"code":-32603,"message":"x","data":1}'),
    (b'{"code":"x","message":7,"data":{"k":"v"}}', b'{"code":-32603,"message":"7","data":{"k":"v"}}'),
    (b'{"code":2147483648,"message":"too big for int32"}', b'{"code":-32603,"message":"too big for int32"}'),
    (b'{"code":1.0,"message":{"not":"text"}}', b'{"code":-32603,"message":"{\\"not\\":\\"text\\"}"}'),
    (b'{"message":"no code"}', b'{"code":-32603,"message":"no code"}'),
]
CASES: list[tuple[bytes, bytes]] = [(e, e) for e in VALID] + FIXED


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(backend, store location): a folder, or an empty PostgreSQL database."""
    if request.param == "postgres":
        return "postgres", str(request.getfixturevalue("pg_dsn"))
    return str(request.param), str(tmp_path / "store")


def error_agent(store: str, backend: str) -> WrappedProcess:
    return WrappedProcess(store, [sys.executable, str(ERROR_AGENT)], backend=backend)


def answer_line(agent: AgentProcess, request_id: int) -> bytes:
    """The bytes of the agent's answer to `request_id`, as it wrote them."""
    found = [line for line in agent.lines if orjson.loads(line).get("id") == request_id
             and "method" not in orjson.loads(line)]
    assert len(found) == 1, found
    return found[0]


def settled_again(events: list[Any]) -> list[bytes]:
    """Each stored `turn/end` answered again, the way the host answers a prompt."""
    out = []
    for event in events:
        if event["type"] == "turn/end":
            with pytest.raises(TurnFailedError) as failed:
                answer_of(TurnEnd(event))
            out.append(orjson.dumps(to_rpc_error(failed.value).to_json()))
    return out


async def test_error_answers_pass_through_and_settle_again_from_the_log(tmp_path: Path,
                                                                       backend: tuple[str, str]) -> None:
    kind, store = backend
    work = tmp_path / "work"
    work.mkdir()
    async with error_agent(store, kind) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        for sent, expected in CASES:
            response = await agent.request_raw("session/prompt", {
                "sessionId": sid, "prompt": [{"type": "text", "text": "error " + sent.decode()}]})
            line = answer_line(agent, response["id"])
            # The whole answer, byte for byte: the error object exactly as the child sent
            # it (or as FIXED says), in the envelope every prompt answer has.
            assert line == b'{"jsonrpc":"2.0","error":%s,"id":%d}' % (expected, response["id"]), sent
        live = agent.updates_of(sid)
        # Any request the wrapper passes on is answered the same way: as the child sent it.
        passed = await agent.request_raw("_error_agent/nothing", {"sessionId": sid})
        assert answer_line(agent, passed["id"]) == (
            b'{"jsonrpc":"2.0","id":%d,"error":{"code":-32601,"message":"no _error_agent/nothing here"}}' % passed["id"])

    _, events = stored_log(store, sid, kind)
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert [orjson.dumps(r["agentError"]) for r in ends] == [expected for _, expected in CASES]
    # The reason keeps its words for everything else that reads it (show, stats).
    assert ends[2]["code"] == "not_found" and ends[2]["message"] == "agent says -32002"
    assert ends[11]["code"] == "rate_limit" and ends[11]["retryable"] is True
    assert ends[11]["message"] == "rate limited"
    assert {r["kind"] for r in ends} == {"error"} and all(r["step"] == 1 for r in ends)
    assert settled_again(events) == [expected for _, expected in CASES]

    # A new wrapper loads the session from the log: the same updates, and the stored
    # turn ends still answer as the editor was answered.
    async with error_agent(store, kind) as again:
        await again.initialize()
        loaded = await again.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["turns"] == len(CASES)
        replayed = again.updates_of(sid)
    # Each turn's text, then the note that says it failed, live as on the reload.
    assert texts(replayed, "agent_message_chunk") == texts(live, "agent_message_chunk")
    shown = texts(live, "agent_message_chunk")
    assert shown[0::2] == ["about to fail"] * len(CASES)
    assert all(note.startswith("\n\n[This turn failed: ") for note in shown[1::2]) and len(shown) == 2 * len(CASES)
    _, after = stored_log(store, sid, kind)
    assert settled_again(after) == [expected for _, expected in CASES]


async def test_the_explanation_is_in_sessions_show(tmp_path: Path) -> None:
    """fast-agent without a key says why in `data`; `sessions show` says it too."""
    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    async with error_agent(str(store), "jsonl") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        response = await agent.request_raw("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": "error " + VALID[4].decode()}]})
        assert response["error"]["data"].startswith("Could not resolve authentication method")
    from tests.test_sessions_cli import cli

    out = cli("--store", str(store), "show", sid).out
    assert "error: Internal error" in out
    assert "Could not resolve authentication method. Expected one of api_key" in out
