"""JSON-RPC errors: the one place where failures become error responses.

Handlers raise `RpcError` directly for protocol problems, or let domain errors (the
`session.SessionError` family, a prompt already running) propagate; `to_rpc_error`
turns each family into a code, a message a person can act on, and `data` a program can
read (`data.code` is always a stable word).
"""

from __future__ import annotations

from typing import Any, Final

from session.errors import (
    InvalidSessionIdError,
    SessionCorruptError,
    SessionError,
    SessionLockedError,
    SessionNotFoundError,
    SessionVersionError,
)

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
AUTH_REQUIRED: Final = -32000  # ACP
SESSION_BUSY: Final = -32001  # ours: a prompt is running, or another process owns it
RESOURCE_NOT_FOUND: Final = -32002  # ACP
SESSION_DAMAGED: Final = -32003  # ours: the stored log cannot be loaded as is
REQUEST_CANCELLED: Final = -32800  # ACP ($/cancel_request)


class ModelSpecError(ValueError):
    """A `--model` spec that names no model we can make (raised by acp_bridge.models;
    defined here so that this module does not import the models)."""


class RpcError(Exception):
    """An error response: `code`, `message`, and `data` (a JSON object)."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def invalid_params(message: str, **data: Any) -> RpcError:
    return RpcError(INVALID_PARAMS, message, {"code": "invalid_params", **data})


class PromptInProgressError(Exception):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id} is already running a prompt; cancel it or wait")
        self.session_id = session_id


def to_rpc_error(exc: BaseException) -> RpcError:
    """The error response for any exception a handler lets out."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, SessionError):
        data = exc.data()
        if isinstance(exc, SessionNotFoundError):
            return RpcError(RESOURCE_NOT_FOUND, exc.message, data)
        if isinstance(exc, InvalidSessionIdError):
            return RpcError(INVALID_PARAMS, exc.message, {**data, "field": "sessionId"})
        if isinstance(exc, SessionLockedError):
            return RpcError(SESSION_BUSY, exc.message, data)
        if isinstance(exc, SessionCorruptError | SessionVersionError):
            return RpcError(SESSION_DAMAGED, exc.message, data)
        return RpcError(INTERNAL_ERROR, exc.message, data)
    if isinstance(exc, ModelSpecError):
        return RpcError(INTERNAL_ERROR, f"the model cannot be used: {exc}", {"code": "model_spec"})
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return RpcError(INTERNAL_ERROR, f"the session store is not usable{where}: {exc.strerror or exc}",
                        {"code": "store_unavailable"})
    if isinstance(exc, PromptInProgressError):
        return RpcError(SESSION_BUSY, str(exc), {"code": "prompt_in_progress", "sessionId": exc.session_id})
    return RpcError(INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}", {"code": "internal"})
