"""The JSON-RPC 2.0 peer over stdio: transport, connection, dispatch and the pure protocol helpers.

The public names are here. The error codes and error types come from the pure protocol
core and are imported with the package; `Connection`, `current_request_id` and the
transport are imported on first use (PEP 562), so that code needing only the codes (the
chat client, the agent's error mapping) does not load the connection and anyio with them.
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
    from acp_bridge.rpc.connection import Connection, current_request_id
    from acp_bridge.rpc.transport import FdLineReader, FdWriter

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
    "RpcError",
    "current_request_id",
]

_ON_FIRST_USE = {
    "Connection": "acp_bridge.rpc.connection",
    "current_request_id": "acp_bridge.rpc.connection",
    "FdLineReader": "acp_bridge.rpc.transport",
    "FdWriter": "acp_bridge.rpc.transport",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value
