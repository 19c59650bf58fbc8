"""Domain errors as JSON-RPC errors: the one function where they become error
responses (every connection a host or an engine makes is handed `to_rpc_error`, and so
is every client's connection to its agent, by its owner: chat, the snapshot driver, the
demo; acp_bridge.client cannot import it, and needs no mapper of its own).

Handlers let domain errors propagate (acp_bridge.errors: the `AcpBridgeError` tree);
`to_rpc_error` turns each into a code, a message a person can act on, and `data` a
program can read (`data.code` is always a stable word). A client's answers to its
agent are the exception: a code and words, no `data`, as clients have always answered
(`ClientServiceError`). An `RpcError` (the connection's own) passes through; anything
else is a bug: -32603 `internal`.
"""

from __future__ import annotations

from acp_bridge.errors import (
    AuthRequiredError,
    ClientParamsError,
    ClientResourceNotFoundError,
    ClientServiceError,
    InvalidParamsError,
    MethodNotFoundError,
    ModelSpecError,
    PromptInProgressError,
    RequestRefusedError,
    TurnFailedError,
    WrappedAgentError,
)
from acp_bridge.rpc.protocol import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    SESSION_BUSY,
    SESSION_DAMAGED,
    ClientError,
    RpcError,
    error_object,
    internal_error,
)
from session.errors import (
    ForkTurnError,
    InvalidSessionIdError,
    SessionCorruptError,
    SessionError,
    SessionLockedError,
    SessionNotFoundError,
    SessionVersionError,
)


def to_rpc_error(exc: BaseException) -> RpcError:
    """The error response for any exception a handler lets out."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, InvalidParamsError):
        return RpcError(INVALID_PARAMS, exc.message, {"code": "invalid_params", **exc.details})
    if isinstance(exc, TurnFailedError):
        return RpcError.as_sent(exc.error)
    if isinstance(exc, SessionError):
        data = exc.data()
        if isinstance(exc, SessionNotFoundError):
            return RpcError(RESOURCE_NOT_FOUND, exc.message, data)
        if isinstance(exc, InvalidSessionIdError):
            return RpcError(INVALID_PARAMS, exc.message, {**data, "field": "sessionId"})
        if isinstance(exc, ForkTurnError):
            return RpcError(INVALID_PARAMS, exc.message, {**data, "field": "_meta.acpBridge.atTurn"})
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
    if isinstance(exc, WrappedAgentError):
        return RpcError(INTERNAL_ERROR, exc.message, {"code": exc.code, **exc.details})
    if isinstance(exc, RequestRefusedError):
        return RpcError(INTERNAL_ERROR, exc.message, dict(exc.details))
    if isinstance(exc, ClientResourceNotFoundError):
        return RpcError(RESOURCE_NOT_FOUND, exc.message)
    if isinstance(exc, ClientParamsError):
        return RpcError(INVALID_PARAMS, exc.message)
    if isinstance(exc, ClientServiceError):
        return RpcError(INTERNAL_ERROR, exc.message)
    if isinstance(exc, MethodNotFoundError):
        return RpcError(METHOD_NOT_FOUND, exc.message, dict(exc.details) or None)
    if isinstance(exc, ClientError):
        return relayed(exc)
    return internal_error(exc)


def relayed(exc: ClientError) -> RpcError:
    """The peer's error answer, to be answered as it came to the other side (what a
    wrapped agent or the editor said: its code, message and data, in its order; only
    what is not a JSON-RPC error object is changed: acp_bridge.rpc.protocol.error_object)."""
    return RpcError.as_sent(error_object(exc.error))
