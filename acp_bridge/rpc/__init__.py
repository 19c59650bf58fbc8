"""The JSON-RPC 2.0 peer: transport, connection, answering and the pure protocol helpers.

The public names are here. The error codes and error types come from the pure protocol
core and are imported with the package; `Connection`, `on_cancel`, `current_request_id`
and the transport are imported on first use (PEP 562), so that code needing only the
codes (the agent's error mapping) does not load the connection and anyio with them.

`on_cancel(hook)`, called by a request handler, makes a `$/cancel_request` of that
request call `hook` (in the connection's reader) instead of cancelling the handler's
task; a hook that returns False lets the task be cancelled (answered -32800)
(acp_bridge.rpc.incoming).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from acp_bridge.rpc.protocol import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    RESOURCE_NOT_FOUND,
    SESSION_BUSY,
    SESSION_DAMAGED,
    ClientError,
    RpcError,
)

if TYPE_CHECKING:
    from acp_bridge.rpc.connection import Connection
    from acp_bridge.rpc.incoming import current_request_id, on_cancel
    from acp_bridge.rpc.transport import (
        FdLineReader,
        FdWriter,
        LineReader,
        StreamLineReader,
        StreamWriter,
        Writer,
    )

__all__ = [
    "AUTH_REQUIRED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "SESSION_BUSY",
    "SESSION_DAMAGED",
    "ClientError",
    "Connection",
    "FdLineReader",
    "FdWriter",
    "LineReader",
    "RpcError",
    "StreamLineReader",
    "StreamWriter",
    "Writer",
    "current_request_id",
    "on_cancel",
]

_ON_FIRST_USE = {
    "Connection": "acp_bridge.rpc.connection",
    "current_request_id": "acp_bridge.rpc.incoming",
    "on_cancel": "acp_bridge.rpc.incoming",
    "FdLineReader": "acp_bridge.rpc.transport",
    "FdWriter": "acp_bridge.rpc.transport",
    "LineReader": "acp_bridge.rpc.transport",
    "StreamLineReader": "acp_bridge.rpc.transport",
    "StreamWriter": "acp_bridge.rpc.transport",
    "Writer": "acp_bridge.rpc.transport",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value
