"""One JSON-RPC 2.0 connection: a reader, a task per request, one writer.

Incoming requests are routed by jsonrpcserver (method lookup, notifications, invalid
requests, error responses) and each runs in its own task, so `session/cancel` is read
while a prompt runs. Requests the agent makes of the client go through our own
correlator (ids `acp-bridge:N`, which no client id is mistaken for). Every outgoing
message goes through one queue to one writer task: what is queued first is written
first, which is the ordering barrier the prompt answers rely on.

jsonrpcserver (with jsonschema behind it) takes a quarter of a second to import, so the
`initialize` request is answered by the same handler without it, and the import happens
after that answer is written (DESIGN.md section 1: nothing heavy before `initialize`).
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import orjson

from acp_bridge.errors import (
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    RpcError,
    invalid_params,
    to_rpc_error,
)
from acp_bridge.transport import FdLineReader, FdWriter, TooLong

log = logging.getLogger("acp_bridge.jsonrpc")

Handler = Callable[..., Awaitable[Any]]

# The id of the request a handler is serving: each request runs in its own task, so a
# handler (the prompt) can learn its id for `$/cancel_request` without a parameter.
current_request_id: contextvars.ContextVar[Any] = contextvars.ContextVar("current_request_id", default=None)
SHUTDOWN_GRACE = 1.5  # seconds the running requests get to answer after stdin closes


class ClientError(Exception):
    """The client answered one of our requests with an error."""

    def __init__(self, method: str, error: Any) -> None:
        self.method = method
        self.error = error if isinstance(error, dict) else {"message": str(error)}
        super().__init__(f"{method} failed: {self.error.get('message', self.error)}")


_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})


def _is_id(value: Any) -> bool:
    """ACP request ids are strings or 64-bit integers (orjson reads bigger ones as floats)."""
    return value is None or isinstance(value, str) or (type(value) is int and -(2**63) <= value < 2**64)


def _error(id_: Any, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_ if _is_id(id_) else None, "error": error.to_json()}


class Connection:
    """Serve `methods` (name -> async handler taking the params as keywords) over a
    line reader and a writer until the reader ends."""

    def __init__(
        self,
        reader: FdLineReader,
        writer: FdWriter,
        methods: Mapping[str, Handler],
        *,
        on_eof: Callable[[], Awaitable[None]] | None = None,
        on_cancel_request: Callable[[Any], bool] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._methods = dict(methods)
        self._on_eof = on_eof
        self._on_cancel_request = on_cancel_request
        self._send, self._receive = anyio.create_memory_object_stream[bytes](math.inf)
        self._ids = itertools.count(1)
        self._pending: dict[str, tuple[anyio.Event, list[Any], str]] = {}
        self._inflight: dict[Any, anyio.CancelScope] = {}  # request id -> its task's scope
        self._active = 0  # request tasks started and not finished
        self._idle = anyio.Event()
        self._rpc: Any = None  # jsonrpcserver.async_main, imported after initialize
        self._rpc_methods: dict[str, Any] | None = None

    # --- sending ---------------------------------------------------------------------

    def send(self, message: Any) -> None:
        """Queue a message; the writer task writes queued messages in order."""
        self._send.send_nowait(orjson.dumps(message) + b"\n")

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: Any) -> Any:
        """Ask the client; returns its result or raises ClientError. If the wait is
        cancelled, the client is told with `$/cancel_request`."""
        request_id = f"acp-bridge:{next(self._ids)}"
        done, slot = anyio.Event(), list[tuple[str, Any]]()
        self._pending[request_id] = (done, slot, method)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            self.notify("$/cancel_request", {"requestId": request_id})
            raise
        finally:
            self._pending.pop(request_id, None)
        kind, value = slot[0]
        if kind == "error":
            raise ClientError(method, value)
        return value

    async def _write_loop(self) -> None:
        async with self._receive:
            async for data in self._receive:
                # Whatever else is queued goes out in the same write.
                parts = [data]
                while True:
                    try:
                        parts.append(self._receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                try:
                    await self._writer.write(b"".join(parts))
                except (BrokenPipeError, ConnectionResetError):
                    log.info("the client stopped reading stdout")
                    return

    # --- reading ---------------------------------------------------------------------

    async def serve(self) -> None:
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._write_loop)
            async with anyio.create_task_group() as requests:
                async for line in self._reader.lines():
                    self._on_line(line, requests)
                log.info("stdin closed: stopping")
                if self._on_eof is not None:
                    await self._on_eof()
                if self._active:
                    with anyio.move_on_after(SHUTDOWN_GRACE):
                        await self._idle.wait()
                requests.cancel_scope.cancel()
            self._send.close()

    def _on_line(self, line: bytes | TooLong, tg: anyio.abc.TaskGroup) -> None:
        if isinstance(line, TooLong):
            self.send(_error(None, RpcError(INVALID_REQUEST, "message too large", {
                "code": "too_large", "size": line.size, "limit": self._reader.max_line})))
            return
        if not line.strip():
            return
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self.send(_error(None, RpcError(PARSE_ERROR, "Parse error", {"code": "parse_error", "detail": str(exc)})))
            return
        if isinstance(message, list):
            if not message:
                self.send(_error(None, RpcError(INVALID_REQUEST, "Invalid Request: empty batch")))
                return
            self._spawn(tg, self._batch(message))
        elif isinstance(message, dict) and "method" not in message and "id" in message \
                and ("result" in message or "error" in message):
            self._response(message)
        else:
            self._spawn(tg, self._single(message))

    def _spawn(self, tg: anyio.abc.TaskGroup, work: Awaitable[None]) -> None:
        # Counted here, not when the task starts, so an EOF right behind a request
        # still waits for its answer.
        self._active += 1
        if self._idle.is_set():
            self._idle = anyio.Event()

        async def run() -> None:
            try:
                await work
            finally:
                self._active -= 1
                if not self._active:
                    self._idle.set()

        tg.start_soon(run)

    def _response(self, message: dict[str, Any]) -> None:
        entry = self._pending.get(message["id"]) if isinstance(message.get("id"), str) else None
        if entry is None:
            log.debug("ignoring a response to unknown id %r", message.get("id"))
            return
        done, slot, _ = entry
        slot.append(("error", message["error"]) if "error" in message else ("result", message.get("result")))
        done.set()

    async def _batch(self, messages: list[Any]) -> None:
        answers: list[Any] = []

        async def one(message: Any) -> None:
            if isinstance(message, dict) and "method" not in message and "id" in message \
                    and ("result" in message or "error" in message):
                self._response(message)
                return
            answer = await self._dispatch(message, batched=True)
            if answer is not None:
                answers.append(answer)

        async with anyio.create_task_group() as tg:
            for message in messages:
                tg.start_soon(one, message)
        if answers:
            self.send(answers)

    async def _single(self, message: Any) -> None:
        answer = await self._dispatch(message)
        if answer is not None:
            self.send(answer)

    async def _dispatch(self, message: Any, *, batched: bool = False) -> Any:
        """The response to one request (None for a notification)."""
        if not isinstance(message, dict):
            return _error(None, RpcError(INVALID_REQUEST, "Invalid Request: not an object"))
        is_request = "id" in message
        if is_request and not _is_id(message["id"]):
            return _error(None, RpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer",
                                         {"code": "invalid_id"}))
        # JSON-RPC params are structured (object or array); ACP methods take objects. An
        # array on an otherwise valid request is -32602; anything else wrong with the
        # message is jsonrpcserver's to answer (-32600).
        params = message.get("params")
        if (isinstance(params, list) and is_request and message.get("jsonrpc") == "2.0"
                and isinstance(message.get("method"), str) and set(message) <= _REQUEST_KEYS):
            return _error(message["id"], invalid_params("invalid params: params must be an object (by name)"))
        key = _key(message.get("id")) if is_request else None
        scope = anyio.CancelScope()
        if is_request:
            self._inflight[key] = scope
        if is_request:
            current_request_id.set(message.get("id"))
        try:
            with scope:
                if (self._rpc is None and not batched and message.get("method") == "initialize"
                        and message.get("jsonrpc") == "2.0" and is_request and _is_id(message.get("id"))):
                    answer = await self._direct(message)
                    await self._load_rpc()
                    return answer
                await self._load_rpc()
                return await self._rpc.dispatch_to_serializable(
                    "", methods=self._rpc_methods, deserializer=lambda _: message,
                    validator=_check_envelope)
            if scope.cancelled_caught and is_request:
                return _error(message.get("id"), RpcError(REQUEST_CANCELLED, "Request cancelled",
                                                          {"code": "cancelled"}))
            return None
        finally:
            if is_request:
                self._inflight.pop(key, None)

    async def _direct(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Answer a request without jsonrpcserver (only `initialize`, see the docstring).
        A success is queued at once (before the import that follows); an error is
        returned to be queued by the caller."""
        params = message.get("params", {})
        try:
            if not isinstance(params, dict):
                raise invalid_params("invalid params: params must be an object")
            result = await self._methods[message["method"]](**params)
        except Exception as exc:
            return _error(message.get("id"), to_rpc_error(exc))
        # Queue the answer now, before the heavy import that follows it.
        self.send({"jsonrpc": "2.0", "id": message.get("id"), "result": result})
        return None

    async def _load_rpc(self) -> None:
        if self._rpc is not None:
            return
        main = await anyio.to_thread.run_sync(_import_jsonrpcserver)
        if self._rpc is None:
            self._rpc = main
            self._rpc_methods = {name: _wrap(main, fn) for name, fn in self._methods.items()}

    def cancel_incoming(self, request_id: Any) -> bool:
        """`$/cancel_request`: let the owner handle it (a prompt settles as cancelled),
        else cancel the request's task, which then answers -32800."""
        if self._on_cancel_request is not None and self._on_cancel_request(request_id):
            return True
        scope = self._inflight.get(_key(request_id))
        if scope is None:
            return False
        scope.cancel()
        return True


def _check_envelope(request: Any) -> Any:
    """jsonrpcserver's request schema (one request, as we dispatch them one by one),
    checked in plain Python: its jsonschema validation costs ~0.14 ms a request. Any
    exception here is answered -32600 by jsonrpcserver."""
    if (
        not isinstance(request, dict)
        or request.get("jsonrpc") != "2.0"
        or not isinstance(request.get("method"), str)
        or not set(request) <= _REQUEST_KEYS
        or not isinstance(request.get("params", {}), dict | list)
        or ("id" in request and not _is_id(request["id"]))
    ):
        raise ValueError("not a JSON-RPC 2.0 request")
    return request


def _key(request_id: Any) -> Any:
    # 1 and 1.0 and "1" are different ids; a tuple keeps them apart in the dict.
    return (type(request_id).__name__, request_id)


def _import_jsonrpcserver() -> Any:
    from jsonrpcserver import async_main

    return async_main


def _wrap(main: Any, fn: Handler) -> Any:
    """A jsonrpcserver method around one of our handlers: params by name only, our
    errors converted in one place (errors.to_rpc_error)."""
    from jsonrpcserver import Error, InvalidParams, Success

    async def method(*args: Any, **params: Any) -> Any:
        if args:
            return InvalidParams("params must be an object (by name), not an array")
        try:
            return Success(await fn(**params))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            error = to_rpc_error(exc)
            if error.code == -32603 and not isinstance(exc, RpcError):
                log.exception("handler failed")
            return Error(error.code, error.message, error.data)

    return method
