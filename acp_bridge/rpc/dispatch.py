"""jsonrpcserver, as the connection drives it: one parsed request at a time, through the
library's public API only.

Importing `jsonrpcserver` runs its package `__init__`, which loads jsonschema and an
http.server we never use (~55 ms and ~6 MB of RSS here). So the connection imports this
module in a worker thread after the `initialize` answer is queued
(acp_bridge.rpc.incoming, `_import_dispatcher`), never on the start-up path.

Each request is answered by `jsonrpcserver.dispatch_to_serializable`, with its public
`deserializer=` and `validator=` hooks: our messages are parsed already, and the
library's jsonschema request check is `valid_envelope` in plain Python (the same rules,
0.5 µs a request instead of ~40 µs). The handler is awaited first, here, in the request's own
task, and the library then "calls" a method that hands back its result or raises its
exception (`Answered`). The library's async entry point would run the handler in a task
of its own (`asyncio.gather`), which a cancelled request reaches with plain
`Task.cancel()` calls, again and again until it ends: they break through the handler's
shielded clean-ups (a cancelled `session/load` releasing its session), which anyio keeps
safe in the request's own task (tests/test_jsonrpc_connection.py pins it). It is also
dearer: ~31 µs a request against ~14 µs this way, measured in-process. Either way the
answers are the library's own (method lookup, notifications, invalid requests, error
and success responses), compared with its async entry point by the same tests.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from jsonrpcserver import Error, InvalidParams, Success, dispatch_to_serializable

from acp_bridge.rpc.protocol import INTERNAL_ERROR, ErrorMapper, Handler, is_bug, valid_envelope

log = logging.getLogger("acp_bridge.rpc.connection")

Method = Callable[..., Awaitable[Any]]  # a jsonrpcserver method: returns its Result


def as_is(message: Any) -> Any:
    """jsonrpcserver's `deserializer` (the connection has parsed the line already), and
    its `validator` where `valid_envelope` has just passed."""
    return message


def checked(message: Any) -> Any:
    """jsonrpcserver's `validator`: its request schema as `valid_envelope` checks it. A
    failure becomes the library's -32600 answer (whatever the exception says)."""
    if not valid_envelope(message):
        raise ValueError("not a JSON-RPC 2.0 request")
    return message


class Answered:
    """The method jsonrpcserver calls once a handler has run: it hands back the
    handler's result (a jsonrpcserver Result), or raises what the handler raised, for
    the library to answer as it would have. It takes any arguments, and says so in
    `__signature__`: the library checks every call with `inspect.signature(...).bind`,
    which otherwise rebuilds the signature from the code at each request (~5 µs)."""

    __slots__ = ("_failure", "_result")
    __signature__ = inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                                       inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])

    def __init__(self, result: Any = None, failure: Exception | None = None) -> None:
        self._result = result
        self._failure = failure

    def __call__(self, *_: Any, **__: Any) -> Any:
        if self._failure is not None:
            raise self._failure
        return self._result


def _error(exc: Exception, error_for: ErrorMapper) -> Any:
    """The jsonrpcserver Error result for a handler's exception."""
    error = error_for(exc)
    if error.code == INTERNAL_ERROR and is_bug(exc):
        log.exception("handler failed")
    return Error(error.code, error.message, error.data)


class JsonRpcDispatcher:
    """Our handlers as jsonrpcserver methods, and one parsed request answered at a time.

    A handler that returns (the usual case: a prompt's answer) is answered here, with
    the library's own success response, `{"jsonrpc": "2.0", "result": ..., "id": ...}`
    (its `serialize_success`), or nothing for a notification: what the library builds
    from a `Success`, without its result objects and signature check (~20 µs a request,
    measured in the wrapper's profile). Everything else (errors, array params, unknown
    methods, invalid requests) is the library's to answer, as before."""

    def __init__(self) -> None:
        self._handlers: dict[Method, tuple[Handler, ErrorMapper]] = {}

    def wrap(self, fn: Handler, error_for: ErrorMapper) -> Method:
        """A jsonrpcserver method around one of our handlers: params by name only, our
        errors converted by `error_for` (the one place: acp_bridge.host.errors)."""

        async def method(*args: Any, **params: Any) -> Any:
            if args:
                return InvalidParams("params must be an object (by name), not an array")
            try:
                return Success(await fn(**params))
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                return _error(exc, error_for)

        self._handlers[method] = (fn, error_for)
        return method

    async def dispatch(self, methods: Mapping[str, Method], message: Any) -> Any:
        """The serializable response to one parsed message, None for a notification."""
        method = methods.get(message["method"]) if valid_envelope(message) else None
        if method is None:  # the library answers: an invalid request, an unknown method
            return dispatch_to_serializable(message, {}, deserializer=as_is, validator=checked)
        params = message.get("params")
        handler = self._handlers.get(method) if not isinstance(params, list) else None
        if handler is not None:
            fn, error_for = handler
            try:
                value = await fn(**(params or {}))
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                answered = Answered(_error(exc, error_for))
            else:
                return {"jsonrpc": "2.0", "result": value, "id": message["id"]} if "id" in message else None
        else:
            args, kwargs = (params, {}) if isinstance(params, list) else ((), params or {})
            try:
                answered = Answered(await method(*args, **kwargs))
            except Exception as exc:  # raised again inside the library, which answers for it
                answered = Answered(failure=exc)
        return dispatch_to_serializable(message, {message["method"]: answered},
                                        deserializer=as_is, validator=as_is)
