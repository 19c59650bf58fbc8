"""Domain errors on the wire: the one conversion (acp_bridge.host.errors.to_rpc_error)
as a table, byte for byte, for the host's errors and the client side's; what the
client's services (acp_bridge.client.methods) and the snapshot client (its files, its
policy of what ends a run) raise, and what the agent is answered for each."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.client.methods import ClientMethods
from acp_bridge.errors import (
    AgentExitedError,
    AgentProtocolError,
    AuthRequiredError,
    ClientParamsError,
    ClientResourceNotFoundError,
    ClientServiceError,
    InvalidParamsError,
    MethodNotFoundError,
    ModelSpecError,
    PromptInProgressError,
    ReplayError,
    ScenarioError,
    ToolError,
    TurnFailedError,
)
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.params import check_client_params
from acp_bridge.rpc.protocol import ClientError, RpcError, is_bug
from acp_bridge.snapshot.driver import AgentProcess, Run, answers_or_fails
from session.errors import (
    ForkTurnError,
    InvalidSessionIdError,
    SessionCorruptError,
    SessionLockedError,
    SessionNotFoundError,
    SessionVersionError,
    StoreIOError,
)

# (the exception, its error object as it goes on the wire: members in this order)
WIRE: list[tuple[BaseException, dict[str, Any]]] = [
    (RpcError(-32600, "Invalid Request: x", {"code": "invalid_request"}),
     {"code": -32600, "message": "Invalid Request: x", "data": {"code": "invalid_request"}}),
    (InvalidParamsError("cwd must be an absolute path", field="cwd"),
     {"code": -32602, "message": "cwd must be an absolute path", "data": {"code": "invalid_params", "field": "cwd"}}),
    (TurnFailedError({"code": -32603, "message": "turn failed: boom", "data": None}),
     {"code": -32603, "message": "turn failed: boom", "data": None}),
    (SessionNotFoundError("session s not found", session_id="s"),
     {"code": -32002, "message": "session s not found", "data": {"code": "session_not_found", "sessionId": "s"}}),
    (InvalidSessionIdError("not a session id", session_id="../x"),
     {"code": -32602, "message": "not a session id",
      "data": {"code": "invalid_session_id", "sessionId": "../x", "field": "sessionId"}}),
    (ForkTurnError("no turn 9", session_id="s", turn=9, turns=2),
     {"code": -32602, "message": "no turn 9", "data": {"code": "fork_turn", "sessionId": "s", "turn": 9, "turns": 2,
                                                        "field": "_meta.acpBridge.atTurn"}}),
    (SessionLockedError("open elsewhere", session_id="s"),
     {"code": -32001, "message": "open elsewhere", "data": {"code": "session_locked", "sessionId": "s"}}),
    (SessionCorruptError("damaged", session_id="s", offset=10),
     {"code": -32003, "message": "damaged", "data": {"code": "session_corrupt", "sessionId": "s", "offset": 10}}),
    (SessionVersionError("version 9", session_id="s"),
     {"code": -32003, "message": "version 9", "data": {"code": "session_version", "sessionId": "s"}}),
    (StoreIOError("disk full", session_id="s", durableSeq=4),
     {"code": -32603, "message": "disk full", "data": {"code": "store_io", "sessionId": "s", "durableSeq": 4}}),
    (ModelSpecError("no model x"),
     {"code": -32603, "message": "the model cannot be used: no model x", "data": {"code": "model_spec"}}),
    (OSError(errno.EACCES, "Permission denied", "/store"),
     {"code": -32603, "message": "the session store is not usable (/store): Permission denied",
      "data": {"code": "store_unavailable"}}),
    (AuthRequiredError("set OPENAI_API_KEY", ["openai-key"]),
     {"code": -32000, "message": "set OPENAI_API_KEY", "data": {"code": "auth_required", "authMethods": ["openai-key"]}}),
    (PromptInProgressError("s"),
     {"code": -32001, "message": "session s is already running a prompt; cancel it or wait",
      "data": {"code": "prompt_in_progress", "sessionId": "s"}}),
    (AgentExitedError(3),
     {"code": -32603, "message": "the wrapped agent exited with status 3; it is restarted at the next request",
      "data": {"code": "agent_exited", "status": 3}}),
    (AgentProtocolError("an answer ACP does not allow"),
     {"code": -32603, "message": "an answer ACP does not allow", "data": {"code": "agent_protocol"}}),
    (ReplayError("past the end", code="replay_overrun", recording="r.jsonl"),
     {"code": -32603, "message": "past the end", "data": {"code": "replay_overrun", "recording": "r.jsonl"}}),
    # A peer's error answer, passed on as it came (members JSON-RPC does not define dropped).
    (ClientError("fs/read_text_file", {"message": "gone", "code": -32002, "extra": 1}),
     {"message": "gone", "code": -32002}),
    # The client side's: a code and words, no data (as clients have always answered).
    (MethodNotFoundError("method not found: x/y"), {"code": -32601, "message": "method not found: x/y"}),
    (ClientServiceError("cannot write /f: [Errno 13] Permission denied"),
     {"code": -32603, "message": "cannot write /f: [Errno 13] Permission denied"}),
    (ClientResourceNotFoundError("unknown terminal 'term-9'"), {"code": -32002, "message": "unknown terminal 'term-9'"}),
    (ClientParamsError("/etc/passwd is outside the workspace"),
     {"code": -32602, "message": "/etc/passwd is outside the workspace"}),
    # The fake agent's -32601 names the method in its data.
    (MethodNotFoundError("method not found: x (the fake agent serves initialize)", method="x"),
     {"code": -32601, "message": "method not found: x (the fake agent serves initialize)", "data": {"method": "x"}}),
    # Anything else is a bug.
    (ValueError("boom"), {"code": -32603, "message": "internal error: ValueError: boom", "data": {"code": "internal"}}),
]


@pytest.mark.parametrize(("exc", "wire"), WIRE, ids=[type(e).__name__ for e, _ in WIRE])
def test_each_error_becomes_its_wire_error_byte_for_byte(exc: BaseException, wire: dict[str, Any]) -> None:
    assert orjson.dumps(to_rpc_error(exc).to_json()) == orjson.dumps(wire)


# --- the client's services ---------------------------------------------------------------


async def _refuse_permission(**_: Any) -> Any:
    raise ValueError("no keyboard here")


def client_cases(tmp: Path) -> list[tuple[str, dict[str, Any], type[Exception], dict[str, Any]]]:
    """(method, params, the domain error raised, the agent's answer)."""
    missing, folder = tmp / "missing.txt", tmp
    return [
        ("no/such", {}, MethodNotFoundError, {"code": -32601, "message": "method not found: no/such"}),
        ("fs/read_text_file", {"file": "x"}, ClientParamsError,
         {"code": -32602, "message": "invalid params for fs/read_text_file: missing a required argument: 'path'"}),
        ("fs/read_text_file", {"path": str(missing)}, ClientResourceNotFoundError,
         {"code": -32002, "message": f"{missing} does not exist"}),
        ("fs/read_text_file", {"path": str(folder)}, ClientServiceError,
         {"code": -32603, "message": f"cannot read {folder}: {folder} is a directory"}),
        ("terminal/output", {"terminalId": "term-9"}, ClientResourceNotFoundError,
         {"code": -32002, "message": "unknown terminal 'term-9'"}),
        ("terminal/release", {"terminalId": "term-9"}, ClientResourceNotFoundError,
         {"code": -32002, "message": "unknown terminal 'term-9'"}),
        # A failure of a handler's own: answered in the exception's words.
        ("session/request_permission", {}, ClientServiceError,
         {"code": -32603, "message": "ValueError: no keyboard here"}),
    ]


@pytest.mark.anyio
async def test_the_clients_services_raise_domain_errors_answered_as_before(tmp_path: Path) -> None:
    async with anyio.create_task_group() as tg:
        methods = ClientMethods(tg, _refuse_permission, check=check_client_params)
        for method, params, kind, wire in client_cases(tmp_path):
            with pytest.raises(kind) as raised:
                await methods.serve(method, params)
            assert type(raised.value) is kind, method
            assert orjson.dumps(to_rpc_error(raised.value).to_json()) == orjson.dumps(wire), method


@pytest.mark.anyio
@pytest.mark.integration
async def test_a_service_that_cannot_run_says_why_in_its_own_words(tmp_path: Path) -> None:
    target = tmp_path / "no-folder" / "f.txt"
    async with anyio.create_task_group() as tg:
        methods = ClientMethods(tg, _refuse_permission, check=check_client_params)
        with pytest.raises(ClientServiceError) as wrote:
            await methods.serve("fs/write_text_file", {"path": str(target), "content": "x"})
        with pytest.raises(ClientServiceError) as started:
            await methods.serve("terminal/create", {"command": str(tmp_path / "no-such-program")})
        with pytest.raises(ClientServiceError) as asked:
            await methods.serve("session/request_permission", {})
    assert to_rpc_error(wrote.value).to_json() == {"code": -32603, "message": wrote.value.message}
    assert wrote.value.message.startswith(f"cannot write {target}: [Errno 2]")
    assert started.value.message.startswith(f"cannot start {tmp_path / 'no-such-program'}: [Errno 2]")
    # An unexpected failure logs its traceback (a bug); the expected ones do not.
    assert [is_bug(e.value) for e in (wrote, started, asked)] == [False, False, True]


@pytest.mark.anyio
async def test_a_tool_error_of_a_handler_is_answered_in_its_words_not_as_a_bug(tmp_path: Path) -> None:
    async def refuses(**_: Any) -> Any:
        raise ToolError("the editor has no terminal", code="no_terminal")

    async with anyio.create_task_group() as tg:
        methods = ClientMethods(tg, refuses, check=check_client_params)
        with pytest.raises(ClientServiceError) as raised:
            await methods.serve("session/request_permission", {})
    assert to_rpc_error(raised.value).to_json() == {"code": -32603, "message": "ToolError: the editor has no terminal"}
    assert not is_bug(raised.value)


# --- the snapshot client ------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_snapshot_clients_files_and_methods_raise_domain_errors(tmp_path: Path) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "latin1.txt").write_bytes(b"caf\xe9")
    agent = AgentProcess(Run(tmp_path, workspace.resolve(), tmp_path / "store"), [], {})
    cases: list[tuple[str, dict[str, Any], type[Exception], dict[str, Any]]] = [
        ("fs/read_text_file", {"path": "/etc/hostname"}, ClientParamsError,
         {"code": -32602, "message": "/etc/hostname is outside the workspace"}),
        ("fs/read_text_file", {"path": str(workspace / "gone.txt")}, ClientResourceNotFoundError,
         {"code": -32002, "message": f"{workspace / 'gone.txt'}: No such file or directory"}),
        ("fs/read_text_file", {"path": str(workspace / "latin1.txt")}, ClientParamsError,
         {"code": -32602, "message": f"{workspace / 'latin1.txt'} is not UTF-8 text"}),
        ("terminal/create", {"command": "ls"}, MethodNotFoundError,  # the scenario did not offer terminals
         {"code": -32601, "message": "the snapshot client serves no terminal/create"}),
    ]
    for method, params, kind, wire in cases:
        with pytest.raises(kind) as raised:
            await agent.answer_agent(method, params)
        assert type(raised.value) is kind, method
        assert orjson.dumps(answers_or_fails(raised.value).to_json()) == orjson.dumps(wire), method


@pytest.mark.parametrize("exc", [ScenarioError("no allow_once option"), KeyError("options"),
                                 ClientServiceError("ValueError: x", bug=True)])
def test_what_is_not_a_refusal_of_the_snapshot_clients_services_ends_the_run(exc: Exception) -> None:
    with pytest.raises(type(exc)):
        answers_or_fails(exc)
