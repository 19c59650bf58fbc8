"""The JSON-RPC 2.0 protocol core, pure: no I/O, no clock, no tasks.

Error codes, the error type every failure becomes, envelope checks, the request key
that keeps `1`, `1.0` and `"1"` apart, the ids of our own requests and the bytes of a
`session/update` notification. The connection (acp_bridge.rpc.connection) does the I/O
around them, in the way h11 keeps its protocol core apart from the sockets.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson

from acp_bridge.errors import AcpBridgeError

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

REQUEST_KEYS: Final = frozenset({"jsonrpc", "id", "method", "params"})

# A `session/update` notification is built from bytes: this head, the session id (JSON),
# `,"update":`, the update (JSON) and this tail. Byte for byte what orjson writes for
# {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId", "update"}}, in
# that key order (clients may recognise the notification by its first bytes).
UPDATE_HEAD: Final = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
UPDATE_TAIL: Final = b"}}\n"

OWN_ID_PREFIX: Final = "acp-bridge:"  # the ids of our requests to the client


class RpcError(AcpBridgeError):
    """An error response: `code`, `message`, and `data` (a JSON object; None: the error
    has no `data` member, never `"data": null`).

    `as_sent` makes one from a peer's error object instead (a wrapped agent's, the
    editor's), which goes out as it came: its members in its order, its `data` whatever
    JSON value it is (null included), nothing added."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self._sent: dict[str, Any] | None = None

    @classmethod
    def as_sent(cls, error: dict[str, Any]) -> RpcError:
        """`error`, an object `error_object` gave (so a valid one), answered again as is."""
        data = error.get("data")
        made = cls(error["code"], error["message"], data if isinstance(data, dict) else None)
        made._sent = dict(error)
        return made

    def to_json(self) -> dict[str, Any]:
        if self._sent is not None:
            return dict(self._sent)
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


ERROR_MEMBERS: Final = ("code", "message", "data")  # a JSON-RPC error object's members
_INT32: Final = range(-(2**31), 2**31)  # ACP's ErrorCode is an int32


def error_object(error: Any) -> dict[str, Any]:
    """A peer's error answer as it can be passed on, changed only where it is not a
    JSON-RPC error object: its `code` if that is an int32 (ACP's ErrorCode; else
    -32603), its `message` if a string (else the value as JSON text), its `data` if it
    has one (any JSON value, null included); its member order; members JSON-RPC does
    not define are dropped (the log keeps this object, and each member is the peer's)."""
    if not isinstance(error, dict):
        error = {"message": error}
    out: dict[str, Any] = {}
    for key, value in error.items():
        if key == "code":
            out[key] = value if type(value) is int and value in _INT32 else INTERNAL_ERROR
        elif key == "message":
            out[key] = value if isinstance(value, str) else orjson.dumps(value).decode()
        elif key == "data":
            out[key] = value
    if "code" not in out:
        out = {"code": INTERNAL_ERROR, **out}
    out.setdefault("message", "")
    return out


class ClientError(AcpBridgeError):
    """The peer answered one of our requests with an error."""

    def __init__(self, method: str, error: Any) -> None:
        self.method = method
        self.error = error if isinstance(error, dict) else {"message": str(error)}
        super().__init__(f"{method} failed: {self.error.get('message', self.error)}")


ErrorMapper = Callable[[BaseException], RpcError]


def is_bug(exc: BaseException) -> bool:
    """Whether a failure says our code is wrong, so its traceback is logged: anything
    but an RpcError and the expected failures of the AcpBridgeError family."""
    if isinstance(exc, RpcError):
        return False
    return not isinstance(exc, AcpBridgeError) or exc.bug
Handler = Callable[..., Awaitable[Any]]  # a method: takes the request's params as keywords


def invalid_params(message: str, **data: Any) -> RpcError:
    return RpcError(INVALID_PARAMS, message, {"code": "invalid_params", **data})


def internal_error(exc: BaseException) -> RpcError:
    """The error response for an exception no layer above knows: the connection's
    default `ErrorMapper` (the agent brings its own, acp_bridge.host.errors)."""
    if isinstance(exc, RpcError):
        return exc
    return RpcError(INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}", {"code": "internal"})


def is_id(value: Any) -> bool:
    """ACP request ids are strings or 64-bit integers (orjson reads bigger ones as floats)."""
    return value is None or isinstance(value, str) or (type(value) is int and -(2**63) <= value < 2**64)


# What matters in a JSON text for finding a member of its top-level object: strings
# (whole, escapes and all), brackets, colons; the rest (numbers, literals, commas,
# whitespace, garbage) lies between them. A quote that opens no closed string ends the
# scan: nothing after it can be told apart from string content.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:]|"', re.S)
_ID_VALUE = re.compile(rb'\s*("(?:[^"\\]|\\.)*"|-?(?:0|[1-9][0-9]*))\s*[,}]', re.S)


# The limits of what a connection takes, one policy for both sides of both processes
# (docs/protocol.md, "Limits"): a line longer than the reader's `max_line` (transport), a
# message nested deeper than MAX_DEPTH, a line the parser refuses (a lone surrogate
# escape, invalid UTF-8). Each is refused where it is read: a request answered with an
# error and its id, an answer to a request of ours settles that request as failed, a
# notification is dropped (logged). MAX_DEPTH keeps what is passed on, recorded or
# answered encodable: orjson's writer stops at 254 levels, and an envelope and a log
# record add a few around a peer's value.
MAX_DEPTH: Final = 200


def nested_deeper(line: bytes, value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` (parsed from `line`) holds arrays and objects nested more than
    `limit` deep. Linear, and a count of brackets in `line` first: a message with fewer
    than `limit` of them (every chunk of a stream) is not walked."""
    if line.count(b"[") + line.count(b"{") <= limit:
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if type(item) is dict:
            stack.extend((v, depth + 1) for v in item.values() if type(v) in (dict, list))
        elif type(item) is list:
            stack.extend((v, depth + 1) for v in item if type(v) in (dict, list))
    return False


def salvaged_id(line: bytes, *, ours: bool = False) -> Any:
    """The id of a request the JSON parser refused (a lone surrogate escape, nesting
    deeper than it takes, invalid UTF-8, a line cut short), read without trusting the
    rest: the `"id"` member of the top-level object, a string or an integer followed by
    `,` or `}` (a number cut short is not taken for another). None if there is none,
    so the parse error is answered with id null as JSON-RPC says for an id that cannot
    be read. Linear in the line, whatever its nesting."""
    text = line.strip()
    if not text.startswith(b"{"):
        return None  # a batch or a bare value: no one id to answer with
    depth, found, key = 0, None, None
    take = _own_id_from if ours else _id_from
    for token in _TOKENS.finditer(text):
        raw = token.group()
        if raw in (b"{", b"["):
            depth, key = depth + 1, None
        elif raw in (b"}", b"]"):
            depth, key = depth - 1, None
            if depth <= 0:
                break
        elif raw == b'"':
            break
        elif depth != 1:
            continue
        elif raw == b":":
            if key is not None and text[key.end():token.start()].strip() == b"" and _is_id_key(key.group()):
                value = _ID_VALUE.match(text, token.end())
                found = take(value.group(1)) if value is not None else None
            key = None
        else:
            key = token
    return found


def _is_id_key(raw: bytes) -> bool:
    try:
        return bool(orjson.loads(raw) == "id")
    except orjson.JSONDecodeError:
        return False


def _id_from(raw: bytes) -> Any:
    try:
        value = orjson.loads(raw)  # (a lone surrogate in it: no id that can be answered)
    except orjson.JSONDecodeError:
        return None
    # An id of ours is the peer's answer to one of our requests, not a request to answer.
    if not is_id(value) or (isinstance(value, str) and value.startswith(OWN_ID_PREFIX)):
        return None
    return value


def _own_id_from(raw: bytes) -> Any:
    """An id of ours (`salvaged_id(..., ours=True)`): the peer's answer to one of our
    requests, which its request then takes as failed."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) and value.startswith(OWN_ID_PREFIX) else None


def valid_envelope(request: Any) -> bool:
    """jsonrpcserver's request schema (one request, as we dispatch them one by one),
    checked in plain Python: its jsonschema validation costs ~0.14 ms a request."""
    return not (
        not isinstance(request, dict)
        or request.get("jsonrpc") != "2.0"
        or not isinstance(request.get("method"), str)
        or not set(request) <= REQUEST_KEYS
        or not isinstance(request.get("params", {}), dict | list)
        or ("id" in request and not is_id(request["id"]))
    )


def envelope_error(request: dict[str, Any]) -> RpcError | None:
    """What is wrong with the envelope of a request whose id can be read (None if
    nothing): it is answered with that id, so a client waiting on it does not hang
    (jsonrpcserver answers any invalid request with id null). A broken envelope is
    -32600. Params that are neither an object nor null (null: no params, as many
    JSON-RPC clients send it) are -32602: JSON-RPC allows arrays, ACP methods take
    objects, and a scalar is a param that breaks every method."""
    if request.get("jsonrpc") != "2.0":
        return RpcError(INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"', {"code": "invalid_request"})
    if not isinstance(request.get("method"), str):
        return RpcError(INVALID_REQUEST, "Invalid Request: method must be a string", {"code": "invalid_request"})
    unknown = set(request) - REQUEST_KEYS
    if unknown:
        names = ", ".join(sorted(unknown))
        return RpcError(INVALID_REQUEST, f"Invalid Request: unknown members ({names[:100]}); a request has "
                        "only jsonrpc, id, method and params", {"code": "invalid_request"})
    params = request.get("params")
    if params is not None and not isinstance(params, dict):
        return invalid_params("invalid params: params must be an object (by name)")
    return None


def without_null_params(message: dict[str, Any]) -> dict[str, Any]:
    """`message` with `"params": null` read as no params (what many JSON-RPC clients
    send for "no parameters"; the method's own checks then name what is missing)."""
    if "params" in message and message["params"] is None:
        return {k: v for k, v in message.items() if k != "params"}
    return message


def is_response(message: Any) -> bool:
    """An answer to one of our requests (not a request or a notification)."""
    return (isinstance(message, dict) and "method" not in message and "id" in message
            and ("result" in message or "error" in message))


def response(id_: Any, result: Any = None, *, error: RpcError | None = None,
             library_order: bool = False) -> dict[str, Any]:
    """The response to a request with `id_` (null if the id cannot be read): its
    `result`, or `error`. The one place a response is built.

    Members come in JSON-RPC's order, `jsonrpc, id, result|error`, for what rpc has
    always answered itself (the first `initialize`, answered before anything else, a
    proxy's fallback, refused envelopes, cancels). With `library_order`, in the order
    jsonrpcserver serializes them (`serialize_success`, `serialize_error`: `jsonrpc,
    result|error, id`), which every method's answer has carried since the library
    answered them: the bytes on the wire stay what clients have seen. Unlike the
    library, an error without `data` goes out without it (not `"data": null`): a
    wrapped agent's error is passed on as it was sent (`RpcError.as_sent`)."""
    if error is None:
        if library_order:
            return {"jsonrpc": "2.0", "result": result, "id": id_}
        return {"jsonrpc": "2.0", "id": id_, "result": result}
    if library_order:
        return {"jsonrpc": "2.0", "error": error.to_json(), "id": id_}
    return {"jsonrpc": "2.0", "id": id_ if is_id(id_) else None, "error": error.to_json()}


def request_message(id_: Any, method: str, params: Any) -> dict[str, Any]:
    """A request of ours to the peer: the one place one is built (the connection's, and
    the wrapper's start-up handshake, which sends the wrapped agent its first request
    before there is a connection: acp_bridge.wrap.handshake)."""
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def request_key(request_id: Any) -> tuple[str, Any]:
    """A dict key for a request id: 1 and 1.0 and "1" are different ids."""
    return (type(request_id).__name__, request_id)


def own_request_id(n: int) -> str:
    """The id of our n-th request to the peer; no client id is mistaken for it."""
    return f"{OWN_ID_PREFIX}{n}"
