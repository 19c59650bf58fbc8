"""The answering side of a connection: how one message the peer sent is answered.

`Incoming` routes one parsed request or notification: `initialize` is answered here
without jsonrpcserver (nothing heavy before `initialize`, DESIGN.md section 1), then
jsonrpcserver is imported in a worker thread and answers everything else through
acp_bridge.rpc.dispatch; a proxy's `fallback` answers the methods it does not serve,
without jsonrpcserver; `inline` notifications are handled at once, by the caller's
task (the connection's reader). It keeps the cancel scope of every request being
answered, so `$/cancel_request` can end it (-32800).

jsonrpcserver is imported in a worker thread after the `initialize` answer is queued:
its package loads jsonschema (~85 ms and ~10 MB of RSS) and an HTTP server we do not use.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from acp_bridge.rpc.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    REQUEST_CANCELLED,
    ErrorMapper,
    Handler,
    RpcError,
    envelope_error,
    error_response,
    invalid_params,
    is_bug,
    is_id,
    request_key,
    valid_envelope,
    without_null_params,
)

if TYPE_CHECKING:
    from acp_bridge.rpc.dispatch import JsonRpcDispatcher, Method

log = logging.getLogger("acp_bridge.rpc.connection")

# A proxy's handler for the methods a connection does not serve itself: called with the
# method, the params as sent and whether an answer is expected; returns the result.
Fallback = Callable[[str, Any, bool], Awaitable[Any]]
# A notification handled in the reader, before the next line is read: what a proxy
# records and passes on in the order it came (a `session/update` stream, then the
# answer that ends it), or a cancel that must take effect before the answer read
# behind it, which a task per message would not guarantee. Returning False hands the
# notification to a task, as any other (a `$/cancel_request` for a request read in
# the same write, whose task has not started yet).
Inline = Callable[[Any], bool | None]

# The id of the request a handler is serving: each request runs in its own task, so a
# handler (the prompt) can learn its id for `$/cancel_request` without a parameter.
current_request_id: contextvars.ContextVar[Any] = contextvars.ContextVar("current_request_id", default=None)


class Incoming:
    """Answer the peer's requests and notifications with `methods` (name -> async
    handler taking the params as keywords), `fallback` and `inline`."""

    def __init__(self, methods: Mapping[str, Handler], send: Callable[[Any], None], *,
                 on_cancel_request: Callable[[Any], bool] | None = None, error_for: ErrorMapper,
                 fallback: Fallback | None = None, inline: Mapping[str, Inline] | None = None) -> None:
        self._methods = dict(methods)
        self._send = send
        # Without a fallback, unknown methods are jsonrpcserver's to answer (-32601).
        self._fallback = fallback
        self.inline = dict(inline or {})
        self._on_cancel_request = on_cancel_request
        self._error_for = error_for  # exceptions -> error responses (the agent's own)
        self._inflight: dict[Any, anyio.CancelScope] = {}  # request id -> its task's scope
        self._rpc: JsonRpcDispatcher | None = None  # imported after initialize
        self._rpc_methods: dict[str, Method] | None = None

    def run_inline(self, message: Any) -> bool:
        """Handle an inline notification now (see `Inline`); False if `message` is not
        one, or its handler leaves it to a task."""
        if not isinstance(message, dict):
            return False
        handler = self.inline.get(str(message.get("method")))
        if handler is None or "id" in message or message.get("jsonrpc") != "2.0":
            return False
        try:
            return handler(message.get("params")) is not False
        except Exception:  # a notification has no answer to carry the failure
            log.exception("handling a %s notification failed", message.get("method"))
        return True

    async def answer(self, message: Any, *, batched: bool = False) -> Any:
        """The response to one request (None for a notification)."""
        if not isinstance(message, dict):
            return error_response(None, RpcError(INVALID_REQUEST, "Invalid Request: not an object"))
        is_request = "id" in message
        if is_request:
            if not is_id(message["id"]):
                return error_response(None, RpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an "
                                                     "integer", {"code": "invalid_id"}))
            # Every request whose id can be read is answered with it (a broken envelope,
            # params that are not an object); notifications are jsonrpcserver's to answer.
            refused = envelope_error(message)
            if refused is not None:
                return error_response(message["id"], refused)
        message = without_null_params(message)
        if not is_request and self.inline and self.run_inline(message):
            return None  # an inline notification inside a batch
        key = request_key(message.get("id")) if is_request else None
        scope = anyio.CancelScope()
        if is_request:
            self._inflight[key] = scope
        # Set for every message: a worker task serves one request after another.
        current_request_id.set(message.get("id") if is_request else None)
        try:
            with scope:
                if (self._rpc is None and not batched and message.get("method") == "initialize"
                        and message.get("jsonrpc") == "2.0" and is_request and is_id(message.get("id"))
                        and "initialize" in self._methods):
                    answer = await self._direct(message)
                    await self._load_rpc()
                    return answer
                if (self._fallback is not None and message.get("method") not in self._methods
                        and valid_envelope(message)):
                    return await self._fall_back(self._fallback, message, is_request)
                rpc, methods = await self._load_rpc()
                return await rpc.dispatch(methods, message)
            if scope.cancelled_caught and is_request:
                return error_response(message.get("id"), RpcError(REQUEST_CANCELLED, "Request cancelled",
                                                          {"code": "cancelled"}))
            return None
        finally:
            if is_request:
                self._inflight.pop(key, None)

    async def _fall_back(self, fallback: Fallback, message: dict[str, Any], is_request: bool) -> Any:
        """Answer a method we do not serve with the fallback's result or error, without
        jsonrpcserver (a proxy passes such methods on, and every answer is the peer's)."""
        try:
            result = await fallback(message["method"], message.get("params"), is_request)
        except Exception as exc:
            error = self._error_for(exc)
            if error.code == INTERNAL_ERROR and is_bug(exc):
                log.exception("passing on %s failed", message["method"])
            if not is_request:
                log.info("notification %s failed: %s", message["method"], error.message)
                return None
            return error_response(message["id"], error)
        return {"jsonrpc": "2.0", "id": message["id"], "result": result} if is_request else None

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
            return error_response(message.get("id"), self._error_for(exc))
        # Queue the answer now, before the heavy import that follows it.
        self._send({"jsonrpc": "2.0", "id": message.get("id"), "result": result})
        return None

    async def _load_rpc(self) -> tuple[JsonRpcDispatcher, dict[str, Method]]:
        if self._rpc is None or self._rpc_methods is None:
            rpc = await anyio.to_thread.run_sync(_import_dispatcher)
            if self._rpc is None or self._rpc_methods is None:  # not loaded meanwhile
                self._rpc = rpc
                self._rpc_methods = {name: rpc.wrap(fn, self._error_for) for name, fn in self._methods.items()}
        return self._rpc, self._rpc_methods

    def cancel(self, request_id: Any) -> bool:
        """`$/cancel_request`: let the owner handle it (a prompt settles as cancelled),
        else cancel the request's task, which then answers -32800. False if no request
        of that id is being answered."""
        if self._on_cancel_request is not None and self._on_cancel_request(request_id):
            return True
        scope = self._inflight.get(request_key(request_id))
        if scope is None:
            return False
        scope.cancel()
        return True


def _import_dispatcher() -> JsonRpcDispatcher:
    """Import jsonrpcserver (and jsonschema behind it), in a worker thread: the one
    place it is imported, after `initialize` is answered. Python's import lock keeps
    two first requests from importing it twice."""
    from acp_bridge.rpc.dispatch import JsonRpcDispatcher

    return JsonRpcDispatcher()
