"""The agent's failures as JSON-RPC errors: the one place where domain errors become
error responses (the connection is handed `to_rpc_error`).

Handlers raise `RpcError` directly for protocol problems, or let domain errors (the
`session.SessionError` family, a prompt already running) propagate; `to_rpc_error`
turns each family into a code, a message a person can act on, and `data` a program can
read (`data.code` is always a stable word).
"""

from __future__ import annotations

from acp_bridge.models import ModelSpecError
from acp_bridge.rpc.protocol import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
    SESSION_BUSY,
    SESSION_DAMAGED,
    RpcError,
    internal_error,
)
from session.errors import (
    InvalidSessionIdError,
    SessionCorruptError,
    SessionError,
    SessionLockedError,
    SessionNotFoundError,
    SessionVersionError,
)


class PromptInProgressError(Exception):
    """A session's prompt is still running: raised by the turn runner for a second
    prompt, and by the agent for a load or resume of that session (-32001)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id} is already running a prompt; cancel it or wait")
        self.session_id = session_id


class AuthRequiredError(Exception):
    """The session's model needs a key that is not there, or the provider refused the
    one there is (-32000, ACP's `auth_required`). The message names the variable or the
    command to run, never a key."""

    def __init__(self, message: str, methods: list[str]) -> None:
        super().__init__(message)
        self.methods = methods


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
    if isinstance(exc, AuthRequiredError):
        return RpcError(AUTH_REQUIRED, str(exc), {"code": "auth_required", "authMethods": exc.methods})
    if isinstance(exc, PromptInProgressError):
        return RpcError(SESSION_BUSY, str(exc), {"code": "prompt_in_progress", "sessionId": exc.session_id})
    return internal_error(exc)
