"""An ACP test client that drives the real agent as a subprocess over stdio.

Every message the agent sends is validated against the official schema
(tests/acp_schema.validate_agent_message) as it arrives; the client answers the
agent's requests (permission, fs, terminal) from a scripted `ClientPolicy`, and keeps
the whole wire transcript for snapshots (`normalized()`).
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson

from tests.support.acp_schema import validate_agent_message
from tests.support.waiting import until

CLIENT_CAPS_NONE: dict[str, Any] = {}
CLIENT_CAPS_ALL: dict[str, Any] = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}


class ClientErrorAnswer(Exception):
    """Raised by a policy to answer the agent's request with this JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.error = {"code": code, "message": message}


class AgentError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = error.get("message")
        self.data = error.get("data")


@dataclass
class ClientPolicy:
    """How the client answers the agent's requests."""

    # optionIds; None = cancelled; a dict = the result as given; an exception = that error answer
    permissions: list[str | dict[str, Any] | ClientErrorAnswer | None] = field(default_factory=list)
    hang_permissions: bool = False  # never answer permission requests
    asked: list[dict[str, Any]] = field(default_factory=list)
    fs_calls: list[tuple[str, str]] = field(default_factory=list)
    terminals: dict[str, dict[str, Any]] = field(default_factory=dict)
    # `elicitation/create` answers, in order (the result as given; an exception: that
    # error answer; none left: decline); the requests as they came
    elicitations: list[dict[str, Any] | ClientErrorAnswer] = field(default_factory=list)
    elicited: list[dict[str, Any]] = field(default_factory=list)
    hang_elicitations: bool = False  # never answer them
    # A request of the agent's own that ACP does not have (qwen-code 0.24.4 asks
    # `craft/drainMidTurnQueue` in a turn) is answered -32601, as an editor would;
    # else it fails the test.
    refuse_foreign: bool = False

    async def answer(self, method: str, params: dict[str, Any]) -> Any:
        if self.refuse_foreign and not method.startswith(("session/", "fs/", "terminal/", "elicitation/")):
            raise ClientErrorAnswer(-32601, f"method not found: {method}")
        if method == "elicitation/create":
            self.elicited.append(params)
            if self.hang_elicitations:
                await anyio.sleep_forever()
            elicitation = self.elicitations.pop(0) if self.elicitations else {"action": "decline"}
            if isinstance(elicitation, ClientErrorAnswer):
                raise elicitation
            return elicitation
        if method == "session/request_permission":
            self.asked.append(params)
            if self.hang_permissions:
                await anyio.sleep_forever()
            option = self.permissions.pop(0) if self.permissions else "reject_once"
            if option is None:
                return {"outcome": {"outcome": "cancelled"}}
            if isinstance(option, ClientErrorAnswer):
                raise option
            if isinstance(option, dict):
                return option
            return {"outcome": {"outcome": "selected", "optionId": option}}
        if method == "fs/read_text_file":
            self.fs_calls.append((method, params["path"]))
            text = Path(params["path"]).read_text()
            if params.get("line") or params.get("limit"):
                lines = text.splitlines(keepends=True)
                start = max((params.get("line") or 1) - 1, 0)
                end = start + params["limit"] if params.get("limit") else None
                text = "".join(lines[start:end])
            return {"content": text}
        if method == "fs/write_text_file":
            self.fs_calls.append((method, params["path"]))
            Path(params["path"]).write_text(params["content"])
            return {}
        if method == "terminal/create":
            terminal_id = f"term-{len(self.terminals) + 1}"
            proc = await anyio.run_process([params["command"], *params.get("args", [])],
                                           cwd=params.get("cwd"), check=False, stderr=subprocess.STDOUT)
            self.terminals[terminal_id] = {"output": proc.stdout.decode(), "exitCode": proc.returncode,
                                           "params": params, "released": False}
            return {"terminalId": terminal_id}
        if method.startswith("terminal/"):
            term = self.terminals[params["terminalId"]]
            if method == "terminal/output":
                return {"output": term["output"], "truncated": False,
                        "exitStatus": {"exitCode": term["exitCode"], "signal": None}}
            if method == "terminal/wait_for_exit":
                return {"exitCode": term["exitCode"], "signal": None}
            if method == "terminal/release":
                term["released"] = True
            return {}
        raise AssertionError(f"unexpected agent request {method}")


class AgentProcess:
    """`async with AgentProcess(store, model=...) as agent:` a running agent."""

    def __init__(self, store: Path | str, *, model: str = "echo", backend: str = "jsonl",
                 policy: ClientPolicy | None = None, args: tuple[str, ...] = (),
                 cwd: Path | None = None) -> None:
        self.command = [sys.executable, "-m", "acp_bridge", "--store", str(store), "--backend", backend,
                        "--model", model, *args]
        self.store = store
        self.cwd = cwd
        self.policy = policy or ClientPolicy()
        self.transcript: list[tuple[str, Any]] = []  # ("->" client to agent | "<-", message)
        self.lines: list[bytes] = []  # what the agent wrote, line by line, as bytes
        self.updates: list[dict[str, Any]] = []  # session/update params, in order
        self.notifications_seen = anyio.Event()
        self._ids = itertools.count(1)
        self._pending: dict[Any, tuple[anyio.Event, list[Any], str]] = {}
        self._requested: dict[Any, str] = {}  # our request ids -> method, for validation
        self.stderr = b""
        self.stderr_closed = anyio.Event()  # the agent's stderr read to its end
        self.stdout_closed = anyio.Event()  # and its stdout: every message it sent was taken
        self.returncode: int | None = None
        self.violations: list[str] = []  # schema violations in what the agent sent
        # Methods not checked: a wrapped agent's own that ACP lacks, passed on as it sent
        # them (tests/test_wrap_fidelity.py: qwen-code's `craft/drainMidTurnQueue`).
        self.unchecked: frozenset[str] = frozenset()

    async def __aenter__(self) -> AgentProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = await anyio.open_process(self.command, cwd=self.cwd, env=env)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._read)
        self._tg.start_soon(self._read_stderr)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.proc.returncode is None:
            await self.close_stdin()
            with anyio.move_on_after(10):
                await self.proc.wait()
            if self.proc.returncode is None:
                self.proc.kill()
        self.returncode = await self.proc.wait()
        with anyio.move_on_after(5):  # what it wrote before it exited is read, not cut off by the cancel
            await self.stdout_closed.wait()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        await self.proc.aclose()
        self.check()

    def check(self) -> None:
        """Fail with every schema violation seen so far."""
        if self.violations:
            raise AssertionError("the agent sent invalid ACP messages:\n" + "\n".join(self.violations))

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for chunk in self.proc.stderr:
            self.stderr += chunk
        self.stderr_closed.set()

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        buffer = b""
        async for chunk in self.proc.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self.lines.append(line)
                message = orjson.loads(line)  # stdout carries protocol messages only
                self.transcript.append(("<-", message))
                self._on_message(message)
        self.stdout_closed.set()

    def _validate(self, item: Any) -> None:
        if isinstance(item, dict) and item.get("method") in self.unchecked:
            return
        try:
            validate_agent_message(item, self._requested)
        except AssertionError as exc:  # kept, and raised in the test (not in this task)
            self.violations.append(f"{exc}\nmessage: {orjson.dumps(item).decode()[:2000]}")

    def _on_message(self, message: Any) -> None:
        for item in message if isinstance(message, list) else [message]:
            self._validate(item)
            if "method" in item and "id" in item:
                self._tg.start_soon(self._answer, item)
            elif "method" in item:
                if item["method"] == "session/update":
                    self.updates.append(item["params"])
            elif item.get("id") in self._pending:
                done, slot, _ = self._pending[item["id"]]
                slot.append(item)
                done.set()

    async def _answer(self, request: dict[str, Any]) -> None:
        try:
            result = await self.policy.answer(request["method"], request["params"])
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"], "result": result}
        except FileNotFoundError as exc:
            reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32002, "message": str(exc)}}
        except ClientErrorAnswer as exc:
            reply = {"jsonrpc": "2.0", "id": request["id"], "error": exc.error}
        await self.send(reply)

    async def send(self, message: Any) -> None:
        self.transcript.append(("->", message))
        await self.send_raw(orjson.dumps(message) + b"\n")

    async def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(data)

    async def request(self, method: str, params: Any = None, *, timeout: float = 20) -> Any:
        """Send a request and wait for its answer; raises AgentError for an error."""
        response = await self.request_raw(method, params, timeout=timeout)
        if "error" in response:
            raise AgentError(response["error"])
        return response["result"]

    async def request_raw(self, method: str, params: Any = None, *, timeout: float = 20,
                          request_id: Any = None) -> dict[str, Any]:
        rid = next(self._ids) if request_id is None else request_id
        done, slot = anyio.Event(), list[Any]()
        self._pending[rid] = (done, slot, method)
        self._requested[rid] = method
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        with anyio.fail_after(timeout):
            await done.wait()
        del self._pending[rid]
        self.check()
        return dict(slot[0])

    def prompt_soon(self, tg: anyio.abc.TaskGroup, sid: str, text: str, **kw: Any) -> dict[str, Any]:
        """Send `session/prompt` from a task of `tg` and go on; the dict returned is
        filled with the raw answer when it comes (`request_raw` keywords apply)."""
        answer: dict[str, Any] = {}

        async def run() -> None:
            answer.update(await self.request_raw(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}, **kw))

        tg.start_soon(run)
        return answer

    async def cancelled_when(self, sid: str, text: str, ready: Callable[[], bool], *,
                             wait: float = 10, **kw: Any) -> dict[str, Any]:
        """Prompt `text`, send `session/cancel` once `ready()` holds (within `wait`
        seconds), and return the prompt's raw answer (`request_raw` keywords apply)."""
        async with anyio.create_task_group() as tg:
            answer = self.prompt_soon(tg, sid, text, **kw)
            await self.wait_for(ready, timeout=wait)
            await self.notify("session/cancel", {"sessionId": sid})
        return answer

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    # --- conveniences ----------------------------------------------------------------

    async def initialize(self, caps: dict[str, Any] | None = None) -> Any:
        return await self.request("initialize", {"protocolVersion": 1, "clientCapabilities": caps or {},
                                                 "clientInfo": {"name": "tests", "version": "0"}})

    async def new_session(self, cwd: Path, **extra: Any) -> str:
        result = await self.request("session/new", {"cwd": str(cwd), "mcpServers": [], **extra})
        return str(result["sessionId"])

    async def load_session(self, sid: str, cwd: Path) -> Any:
        """`session/load` of a stored session, no MCP servers; its answer."""
        return await self.request("session/load", {"sessionId": sid, "cwd": str(cwd), "mcpServers": []})

    async def prompt(self, sid: str, text: str, **kw: Any) -> Any:
        return await self.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]},
                                  **kw)

    def updates_of(self, sid: str) -> list[dict[str, Any]]:
        return [u["update"] for u in self.updates if u["sessionId"] == sid]

    def call_trail(self, call_id: str) -> list[tuple[str, str | None]]:
        """What a client applies to the tool call `call_id`, in wire order: (the update's
        kind, its status) for each update that sets one, and ("request_permission", the
        status its `toolCall` gives, if any) for each permission request about it."""
        trail: list[tuple[str, str | None]] = []
        for direction, message in self.transcript:
            if direction != "<-" or "method" not in message:
                continue
            params = message["params"]
            if message["method"] == "session/update":
                update = params["update"]
                if update.get("toolCallId") == call_id and "status" in update:
                    trail.append((update["sessionUpdate"], update["status"]))
            elif message["method"] == "session/request_permission" and params["toolCall"]["toolCallId"] == call_id:
                trail.append(("request_permission", params["toolCall"].get("status")))
        return trail

    def replayed(self, sid: str, method: str = "session/load") -> list[dict[str, Any]]:
        """The updates for `sid` between the last `session/load` of it (or `method`:
        `session/resume`) and that request's answer: its replay and the session's
        commands, without what a wrapped agent sends once loaded (opencode sends its
        commands again right after its load: the wrapper holds them until the next
        request on the session)."""
        load = next(m["id"] for d, m in reversed(self.transcript) if d == "->" and m.get("method") == method
                    and (m.get("params") or {}).get("sessionId") == sid)
        updates: list[dict[str, Any]] | None = None
        for direction, message in self.transcript:
            if direction == "->" and message.get("id") == load and message.get("method") == method:
                updates = []
            elif updates is not None and direction == "<-" and message.get("id") == load and "method" not in message:
                return updates
            elif updates is not None and direction == "<-" and message.get("method") == "session/update" \
                    and message["params"].get("sessionId") == sid:
                updates.append(message["params"]["update"])
        raise AssertionError(f"the {method} of {sid} was not answered")

    def after_answer(self, sid: str, method: str = "session/load") -> list[dict[str, Any]]:
        """The updates for `sid` written after the answer of the last `method` request
        on it, up to the client's next request on `sid` (or up to now): what a load or
        resume must not be followed by (docs/protocol.md, "Sessions")."""
        asked = next(m["id"] for d, m in reversed(self.transcript) if d == "->" and m.get("method") == method
                     and (m.get("params") or {}).get("sessionId") == sid)
        after: list[dict[str, Any]] | None = None
        for direction, message in self.transcript:
            if after is None:
                if direction == "<-" and message.get("id") == asked and "method" not in message:
                    after = []
            elif direction == "->" and "id" in message and (message.get("params") or {}).get("sessionId") == sid:
                return after
            elif direction == "<-" and message.get("method") == "session/update" \
                    and message["params"].get("sessionId") == sid:
                after.append(message["params"]["update"])
        if after is None:
            raise AssertionError(f"the {method} of {sid} was not answered")
        return after

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10,
                       why: str = "what the test waits for from the agent") -> None:
        await until(predicate, why, timeout=timeout)


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PYTEST_NUMBER = re.compile(r"(?<=[a-z_])\d+$")
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


# A script step many tests share: write out.txt, so ask for permission first.
WRITE_STEP: dict[str, Any] = {"text": "Writing.", "toolCalls": [
    {"id": "w1", "name": "write_file", "arguments": {"path": "out.txt", "content": "hi\n"}}]}
# Two turns: WRITE_STEP, then a second write (of no.txt), to allow and to refuse.
WRITE_TWICE_STEPS: tuple[dict[str, Any], ...] = (
    WRITE_STEP,
    {"text": "Written."},
    {"toolCalls": [{"id": "w2", "name": "write_file", "arguments": {"path": "no.txt", "content": "x"}}]},
    {"text": "Fine, not written."},
)

# Read, edit and run in the session's folder (the `work` fixture's notes.txt): served by
# the client when it offers fs and terminal.
FS_AND_TERMINAL_STEP: dict[str, Any] = {"toolCalls": [
    {"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}},
    {"id": "e1", "name": "edit_file", "arguments": {"path": "notes.txt", "old_text": "two", "new_text": "2"}},
    {"id": "x1", "name": "run_command", "arguments": {"command": "cat notes.txt"}}]}


def write_script(path: Path, *steps: dict[str, Any], chunk_delay_ms: int = 0) -> str:
    """Write a `script:` model file (one entry per model call) and return its spec."""
    doc: dict[str, Any] = {"steps": list(steps)}
    if chunk_delay_ms:
        doc["chunkDelayMs"] = chunk_delay_ms
    path.write_bytes(orjson.dumps(doc))
    return f"script:{path}"


def normalized(transcript: list[tuple[str, Any]], *paths: Path) -> list[Any]:
    """The transcript with volatile values replaced: session ids, times, paths."""
    text = orjson.dumps([{"dir": d, "msg": m} for d, m in transcript]).decode()
    for path in sorted(paths, key=lambda p: -len(str(p))):
        # pytest numbers a test's tmp_path after the tests of the same name that ran
        # before it in the session (test_max_steps0, 1...): the number is not pinned.
        text = text.replace(str(path), f"<{_PYTEST_NUMBER.sub('', path.name)}>")
    ids: dict[str, str] = {}
    text = _UUID.sub(lambda m: ids.setdefault(m.group(0), f"<session-{len(ids) + 1}>"), text)
    text = _ISO.sub("<time>", text)
    return list(orjson.loads(text))
