"""The answering side of a connection: how one message the peer sent is answered, and
how a request in flight is cancelled.

One path answers every request. `answer` checks the envelope, finds what serves the
method (our handler, or a proxy's `fallback` for a method we do not serve), calls it in
one place (`_outcome`, where an exception becomes an error through `error_for`, the
one place that happens), and builds the response in one place
(acp_bridge.rpc.protocol.response). jsonrpcserver answers, through its public API,
what nothing of ours serves: a request for an unknown method (-32601) and an invalid
notification (-32600, id null); a valid notification nobody serves has no answer, and
needs no library to say so. It is not on the path of the methods we serve: its method
lookup, signature check and result objects cost ~14 µs a request (bench/README.md),
more than the rest of a small request, so the lookup of our methods is a dict's.

Nor is its import: its package loads jsonschema (~85 ms and ~10 MB of RSS) and an HTTP
server we do not use, so it is imported, in a worker thread, by the first message that
needs it, and only then (a client that sends none never loads it); no message we serve
waits for it (bench/README.md, "Issue 32"). The answers of our methods keep the member
order they had when the library was loaded after the first message: the first
`initialize`, answered before anything else, in JSON-RPC's order (`jsonrpc, id,
result`), every later answer in the library's (`jsonrpc, result, id`; see `response`),
so the bytes clients see are the ones they always saw.

`$/cancel_request` is ours, never a handler's (`cancel`): it cancels the named request's
task, which is answered -32800, unless the handler registered a hook with `on_cancel`
(a prompt settles as cancelled instead, answered by the handler). The reader handles it
as it reads it (`run_inline`), so it takes effect before the next message; a request
read in the same write whose task has not started yet is left to a task, which runs
after that request's task has (it has registered its hook by then).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final

import anyio

from acp_bridge.rpc.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    REQUEST_CANCELLED,
    ErrorMapper,
    Handler,
    RpcError,
    envelope_error,
    is_bug,
    is_id,
    request_key,
    response,
    valid_envelope,
    without_null_params,
)

log = logging.getLogger("acp_bridge.rpc.connection")

CANCEL_REQUEST: Final = "$/cancel_request"

# A proxy's handler for the methods a connection does not serve itself: called with the
# method, the params as sent and whether an answer is expected; returns the result.
Fallback = Callable[[str, Any, bool], Awaitable[Any]]
# A notification handled in the reader, before the next line is read: what a proxy
# records and passes on in the order it came (a `session/update` stream, then the
# answer that ends it), or a cancel that must take effect before the answer read
# behind it, which a task per message would not guarantee. Returning False hands the
# notification to a task, as any other (a `session/cancel` for a prompt read in the
# same write, whose task has not started yet).
Inline = Callable[[Any], bool | None]
# What a `$/cancel_request` of the request calls instead of cancelling its task (see
# `on_cancel`): True if it took the cancel.
CancelHook = Callable[[], bool]


class _Call:
    """One request being answered: its id, its task's cancel scope, its cancel hook."""

    __slots__ = ("hook", "id", "scope")

    def __init__(self, request_id: Any) -> None:
        self.id = request_id
        self.scope = anyio.CancelScope()
        self.hook: CancelHook | None = None

    def cancel(self) -> None:
        hook = self.hook
        if hook is None or not hook():
            self.scope.cancel()


# The request the current task is answering (None for a notification): each request
# runs in a task of its own, so a handler reaches its own request without a parameter.
_current: ContextVar[_Call | None] = ContextVar("acp_bridge_rpc_request", default=None)


def on_cancel(hook: CancelHook) -> None:
    """Have a `$/cancel_request` of the request this handler serves call `hook` (in the
    connection's reader) instead of cancelling the handler's task. If `hook` returns
    False (it could not take the cancel: nothing is running to settle), the task is
    cancelled and the request answered -32800, as without a hook. The last hook
    registered counts; it lives as long as the request. Outside a request (a handler
    serving a notification), nothing can name it: the hook is not kept."""
    call = _current.get()
    if call is not None:
        call.hook = hook


def current_request_id() -> Any:
    """The id of the request the current task is answering (None outside of one)."""
    call = _current.get()
    return None if call is None else call.id


class Incoming:
    """Answer the peer's requests and notifications with `methods` (name -> async
    handler taking the params as keywords), `fallback` and `inline`."""

    def __init__(self, methods: Mapping[str, Handler], send: Callable[[Any], None], *, error_for: ErrorMapper,
                 fallback: Fallback | None = None, inline: Mapping[str, Inline] | None = None,
                 answered_first: bool = False) -> None:
        # `$/cancel_request` is rpc's own: as a request (with an id, answered null) or
        # a notification a task handles (`run_inline` left it).
        self._methods: dict[str, Handler] = {**methods, CANCEL_REQUEST: self._cancel_request}
        self._send = send
        # Without a fallback, unknown methods are jsonrpcserver's to answer (-32601).
        self._fallback = fallback
        self.inline: dict[str, Inline] = {**(inline or {}), CANCEL_REQUEST: self._cancel_now}
        self._error_for = error_for  # exceptions -> error responses (the agent's own)
        self._inflight: dict[tuple[str, Any], _Call] = {}  # request key -> the request being answered
        self._library: Callable[[Any], Any] | None = None  # jsonrpcserver, imported when first needed
        # Our handlers' answers go out in the library's member order from the first
        # message on that is not the first `initialize` (see the module's docstring);
        # from the start if that was answered before (`answered_first`: the wrapper's
        # start-up handshake, acp_bridge.wrap.handshake).
        self._library_order = answered_first

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
        """The response to one message (None for a notification)."""
        if not isinstance(message, dict):
            return response(None, error=RpcError(INVALID_REQUEST, "Invalid Request: not an object"))
        message = without_null_params(message)
        is_request = "id" in message
        if is_request:
            if not is_id(message["id"]):
                return response(None, error=RpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an "
                                                     "integer", {"code": "invalid_id"}))
            # Every request whose id can be read is answered with it (a broken envelope,
            # params that are not an object); invalid notifications are the library's.
            refused = envelope_error(message)
            if refused is not None:
                return response(message["id"], error=refused)
        elif not valid_envelope(message):
            return await self._unserved(message)
        if not is_request and self.run_inline(message):
            return None  # an inline notification inside a batch
        method: str = message["method"]
        params = message.get("params")
        handler = self._methods.get(method)
        args: tuple[Any, ...]
        if handler is not None and not isinstance(params, list):
            fn, args, kwargs = handler, (), params or {}
        elif handler is None and self._fallback is not None:
            fn, args, kwargs = self._fallback, (method, params, is_request), {}
        else:  # an unknown method, or a notification with params by position
            return await self._unserved(message)
        # The first `initialize`, answered before anything else, in JSON-RPC's member
        # order; every other answer of our handlers in the library's (see `response`).
        # A fallback's answers were never the library's.
        first = False
        if fn is handler and not self._library_order:
            first = is_request and not batched and method == "initialize"
            self._library_order = True
        if not is_request:
            _current.set(None)  # a worker task serves one message after another
            result, error = await self._outcome(method, fn, args, kwargs)
            if error is not None:
                log.info("notification %s failed: %s", method, error.message)
            return None
        request_id = message["id"]
        key = request_key(request_id)
        call = self._inflight[key] = _Call(request_id)
        _current.set(call)
        try:
            with call.scope:
                result, error = await self._outcome(method, fn, args, kwargs)
        finally:
            self._inflight.pop(key, None)
        if call.scope.cancelled_caught:
            return response(request_id, error=RpcError(REQUEST_CANCELLED, "Request cancelled", {"code": "cancelled"}))
        return response(request_id, result, error=error, library_order=fn is handler and not first)

    async def _outcome(self, method: str, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> tuple[Any, RpcError | None]:
        """Call the handler: (its result, None) or (None, the error its exception is)."""
        try:
            return await fn(*args, **kwargs), None
        except Exception as exc:  # (a cancellation is not an Exception: it goes through)
            error = self._error_for(exc)
            if error.code == INTERNAL_ERROR and is_bug(exc):
                log.exception("%s failed", method)
            return None, error

    async def _unserved(self, message: Any) -> Any:
        """jsonrpcserver's answer to what none of ours serves, through its public
        `dispatch_to_serializable`: -32601 for an unknown method, -32600 (id null) for
        an invalid notification; nothing for a valid notification, without the library
        (it has no answer to give one)."""
        self._library_order = True
        if "id" not in message and valid_envelope(message):
            return None
        if self._library is None:
            self._library = await anyio.to_thread.run_sync(_import_library)
        return self._library(message)

    def cancel(self, request_id: Any) -> bool:
        """Cancel the request `request_id` if it is being answered: its hook (see
        `on_cancel`), else its task (answered -32800). False if it is not."""
        call = self._inflight.get(request_key(request_id)) if is_id(request_id) else None
        if call is None:
            return False
        call.cancel()
        return True

    def _cancel_now(self, params: Any) -> bool:
        """`$/cancel_request` in the reader. False (a task handles it, `_cancel_request`)
        when no request of that id is being answered: one read in the same write, whose
        task has not started yet, is cancelled there, once it has."""
        return isinstance(params, dict) and self.cancel(params.get("requestId"))

    async def _cancel_request(self, requestId: Any = None, **_: Any) -> None:
        if not self.cancel(requestId):
            log.info("$/cancel_request for %r: no such request in flight", requestId)


def _as_is(message: Any) -> Any:
    """jsonrpcserver's `deserializer` (the connection has parsed the line already)."""
    return message


def _checked(message: Any) -> Any:
    """jsonrpcserver's `validator`: its request schema as `valid_envelope` checks it,
    in plain Python (its jsonschema check costs ~40 µs). A failure becomes the
    library's -32600 answer, whatever the exception says."""
    if not valid_envelope(message):
        raise ValueError("not a JSON-RPC 2.0 request")
    return message


def _import_library() -> Callable[[Any], Any]:
    """Import jsonrpcserver (and jsonschema behind it), in a worker thread: the one
    place it is imported, by the first message nothing of ours serves. Python's import
    lock keeps two such messages from importing it twice."""
    from jsonrpcserver import dispatch_to_serializable

    def unserved(message: Any) -> Any:
        return dispatch_to_serializable(message, {}, deserializer=_as_is, validator=_checked)

    return unserved
