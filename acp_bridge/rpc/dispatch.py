"""jsonrpcserver, as the connection drives it: one parsed request at a time.

The connection (acp_bridge.rpc.connection) reads and parses each message itself, answers
`initialize` before jsonrpcserver is imported, and routes everything else here. Only
jsonrpcserver's dispatcher modules are imported, in a worker thread after `initialize`
is answered: the package's `__init__` also loads its JSON-schema front door (jsonschema:
~85 ms and ~10 MB of RSS) and its HTTP server, neither of which we use.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from acp_bridge.rpc.protocol import INTERNAL_ERROR, ErrorMapper, RpcError, valid_envelope

log = logging.getLogger("acp_bridge.rpc.connection")

Handler = Callable[..., Awaitable[Any]]

_IMPORT_LOCK = threading.Lock()


def _import_dispatcher() -> dict[str, Any]:
    """Import jsonrpcserver's dispatcher, response and result modules without running
    the package `__init__` (which imports `main`, and with it jsonschema, and `server`,
    an http.server). The package object used to resolve their relative imports is
    dropped afterwards, so a later `import jsonrpcserver` (tests compare our answers
    with the library's own entry point) runs the real `__init__`, which finds these
    modules already loaded."""
    names = ("async_dispatcher", "dispatcher", "response", "result", "sentinels")
    with _IMPORT_LOCK:  # the first requests may each load it, in worker threads
        return _import_modules(names)


def _import_modules(names: tuple[str, ...]) -> dict[str, Any]:
    import importlib.util
    import sys

    hollow = "jsonrpcserver" not in sys.modules
    if hollow:
        spec = importlib.util.find_spec("jsonrpcserver")
        assert spec is not None, "jsonrpcserver is not installed"
        sys.modules["jsonrpcserver"] = importlib.util.module_from_spec(spec)
    try:
        # Taken by full name while the package entry stands: `from jsonrpcserver import
        # x` after it is dropped would run the real __init__.
        return {name: importlib.import_module(f"jsonrpcserver.{name}") for name in names}
    finally:
        if hollow:
            del sys.modules["jsonrpcserver"]


class JsonRpcDispatcher:
    """jsonrpcserver, imported (in a worker thread: it is slow to import) and driven
    one parsed request at a time.

    `jsonrpcserver.async_dispatch_to_serializable` would run each request through a
    deserializer and a validator wrapped in oslash `Either`s, an `asyncio.gather` (one
    more task per request) and an `inspect.signature(...).bind` argument check. Our
    messages are parsed already and their envelope is checked in plain Python, and
    every method we register takes `(*args, **params)`, which binds any arguments, so
    `dispatch` runs only the library's method lookup (`get_method`), its call with the
    error results (`async_dispatcher.call`) and its serialization (`to_response`,
    `to_serializable`): the same answers for a quarter of the work (~35 µs a request
    instead of ~140 µs, measured in-process)."""

    def __init__(self) -> None:
        modules = _import_dispatcher()
        async_dispatcher, dispatcher, response = (
            modules["async_dispatcher"], modules["dispatcher"], modules["response"])
        result, sentinels = modules["result"], modules["sentinels"]
        Error, InvalidParams, Success = result.Error, result.InvalidParams, result.Success
        NOCONTEXT, NOID = sentinels.NOCONTEXT, sentinels.NOID
        from oslash.either import Left  # type: ignore[import-untyped, unused-ignore]

        self._get_method = dispatcher.get_method
        self._call = async_dispatcher.call
        self._create_request = dispatcher.create_request
        self._to_response = dispatcher.to_response
        self._to_serializable = response.to_serializable
        self._invalid_request = response.InvalidRequestResponse
        self._server_error = response.ServerErrorResponse
        self._left = Left
        self._nocontext, self._noid = NOCONTEXT, NOID
        self._error, self._invalid_params, self._success = Error, InvalidParams, Success

    def wrap(self, fn: Handler, error_for: ErrorMapper) -> Any:
        """A jsonrpcserver method around one of our handlers: params by name only, our
        errors converted by `error_for` (the one place: acp_bridge.agent.errors)."""
        error_result, invalid_params_result, success = self._error, self._invalid_params, self._success

        async def method(*args: Any, **params: Any) -> Any:
            if args:
                return invalid_params_result("params must be an object (by name), not an array")
            try:
                return success(await fn(**params))
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                error = error_for(exc)
                if error.code == INTERNAL_ERROR and not isinstance(exc, RpcError):
                    log.exception("handler failed")
                return error_result(error.code, error.message, error.data)

        return method

    async def dispatch(self, methods: dict[str, Any], message: Any) -> Any:
        """The serializable response to one parsed message, None for a notification."""
        if not valid_envelope(message):
            return self._to_serializable(self._left(self._invalid_request("The request failed schema validation")))
        try:
            request = self._create_request(message)
            found = self._get_method(methods, request.method)
            result = found if isinstance(found, self._left) else await self._call(
                request, self._nocontext, found._value)
            if request.id is self._noid:
                return None
            return self._to_serializable(self._to_response(request, result))
        except Exception as exc:  # a failure inside the library, as it answers one
            log.exception("jsonrpcserver failed")
            return self._to_serializable(self._left(self._server_error(str(exc), None)))
