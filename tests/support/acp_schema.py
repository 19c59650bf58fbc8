"""Validating what the agent sends against the official ACP v1 schema.

The schema's root accepts almost anything (its extension branches are open), so every
message is checked against the definition for its method instead (tests/support/acp/SOURCE.txt).
Two files of the same release are vendored: the stable schema, which every message is
checked against, and the unstable one (`schema.unstable.json`: the stable protocol
plus what is not part of the spec yet), which a message is checked against too when
the stable schema does not define its method or its definition's own members differ
there (`PromptResponse.usage`, the unstable capabilities of `InitializeResponse`).
The method -> definition table is read from the `x-method` / `x-side` annotations of the
schema's `$defs`, not written out here, so it follows the schema file. `x-side` names
the side that handles the method: "agent" for methods the client calls (the agent
sends their responses), "client" for methods the agent calls or notifies.

Failures raise SchemaViolation, an AssertionError, so pytest reports them as test
failures with the offending path and message.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

RequestId = str | int | None


class SchemaViolation(AssertionError):
    """A message does not match the ACP schema or the JSON-RPC envelope."""


def schema_path(*, unstable: bool = False) -> Path:
    """`$ACP_SCHEMA` (`$ACP_SCHEMA_UNSTABLE`) if set, else the vendored copy in
    tests/support/acp/ (see SOURCE.txt there)."""
    override = os.environ.get("ACP_SCHEMA_UNSTABLE" if unstable else "ACP_SCHEMA")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent / "acp" / ("schema.unstable.json" if unstable else "schema.json")


@functools.cache
def schema(*, unstable: bool = False) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schema_path(unstable=unstable).read_text(encoding="utf-8"))
    return loaded


def defs(*, unstable: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = schema(unstable=unstable)["$defs"]
    return d


@functools.cache
def validator(name: str, *, unstable: bool = False) -> Draft202012Validator:
    if name not in defs(unstable=unstable):
        raise KeyError(f"the ACP {'unstable ' if unstable else ''}schema has no definition {name!r}")
    return Draft202012Validator({"$defs": defs(unstable=unstable), "$ref": f"#/$defs/{name}"})


@functools.cache
def extended_by_unstable(name: str) -> bool:
    """Whether the unstable schema defines `name` where the stable one does not, or
    with other members of its own (a message of it is checked against both)."""
    return defs().get(name) != defs(unstable=True).get(name)


def validate_def(name: str, instance: Any, *, unstable: bool = False) -> None:
    """Raise SchemaViolation unless `instance` matches the definition `name` (of the
    unstable schema with `unstable`)."""
    errors = list(validator(name, unstable=unstable).iter_errors(instance))
    if errors:
        error = best_match(errors)
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        raise SchemaViolation(
            f"{name}{' (unstable)' if unstable else ''}: {error.message} at {where} ({len(errors)} error(s))\n"
            f"instance: {json.dumps(instance, default=str)[:2000]}"
        )


@dataclass(frozen=True)
class MethodDefs:
    """The definitions of one method, from the schema's annotations."""

    method: str
    side: str  # the side that handles the method: "agent", "client" or "protocol"
    params: str | None = None  # XRequest or XNotification
    result: str | None = None  # XResponse; None for notifications

    @property
    def is_notification(self) -> bool:
        return self.result is None


@functools.cache
def method_table(*, unstable: bool = False) -> dict[str, MethodDefs]:
    """method name -> its definitions, from every def that carries `x-method` (in the
    unstable schema with `unstable`)."""
    annotated = [(name, d) for name, d in defs(unstable=unstable).items() if "x-method" in d]
    requested = {d["x-method"] for name, d in annotated if name.endswith("Request")}
    found: dict[str, dict[str, str]] = {}
    for name, definition in annotated:
        method = definition["x-method"]
        if unstable and method in requested and name.endswith("Notification"):
            # unstable `mcp/message` (1.24) is a request the agent sends and a notification
            # the client sends: its request and response are kept, with their side.
            continue
        entry = found.setdefault(method, {"side": definition["x-side"]})
        if entry["side"] != definition["x-side"]:
            raise ValueError(f"{method}: defs disagree on x-side")
        for suffix, slot in (("Request", "params"), ("Notification", "params"), ("Response", "result")):
            if name.endswith(suffix):
                if slot in entry:
                    raise ValueError(f"{method}: two {slot} definitions ({entry[slot]}, {name})")
                entry[slot] = name
                break
        else:
            raise ValueError(f"{name} has x-method but is not a Request/Response/Notification")
    return {
        method: MethodDefs(method, e["side"], e.get("params"), e.get("result"))
        for method, e in found.items()
    }


def _check_envelope(msg: Mapping[str, Any]) -> None:
    if not isinstance(msg, Mapping):
        raise SchemaViolation(f"a JSON-RPC message must be an object, got {msg!r}")
    if msg.get("jsonrpc") != "2.0":
        raise SchemaViolation(f'"jsonrpc" must be "2.0": {msg!r}')
    if "id" in msg:
        msg_id = msg["id"]
        # bool is an int in Python but not a JSON-RPC id.
        if not (msg_id is None or isinstance(msg_id, str) or (type(msg_id) is int)):
            raise SchemaViolation(f"id must be a string, an integer or null: {msg_id!r}")


def validate_agent_message(msg: Mapping[str, Any], pending_requests: Mapping[RequestId, str]) -> str:
    """Validate one message the agent wrote. `pending_requests` maps the ids of the
    client's requests still awaiting an answer to their methods (the caller keeps it;
    this function does not change it). Returns what the message was checked as, e.g.
    "PromptResponse", "error", "SessionNotification"."""
    _check_envelope(msg)
    table = method_table()
    if "method" not in msg:
        return _validate_response(msg, pending_requests)
    method = msg["method"]
    if not isinstance(method, str):
        raise SchemaViolation(f"method must be a string: {msg!r}")
    is_request = "id" in msg
    allowed = {"jsonrpc", "method", "params"} | ({"id"} if is_request else set())
    if set(msg) - allowed:
        raise SchemaViolation(f"unexpected members {sorted(set(msg) - allowed)}: {msg!r}")
    params = msg.get("params")
    if method.startswith("_"):  # an extension method: only the envelope is fixed
        if params is not None and not isinstance(params, dict | list):
            raise SchemaViolation(f"{method}: params must be structured: {msg!r}")
        return "extension"
    entry = table.get(method) or method_table(unstable=True).get(method)
    if entry is None or entry.side not in ("client", "protocol") or entry.params is None:
        raise SchemaViolation(f"the agent may not send {method!r}: {msg!r}")
    if entry.is_notification == is_request:
        kind = "a request" if is_request else "a notification"
        raise SchemaViolation(f"{method} sent as {kind}: {msg!r}")
    if method == "session/update" and _unstable_variant(params):
        # A kind of update only the unstable schema has (`subagent_update`; before v1.25
        # `notice` and `compaction_update` too; sent to a client that advertised the
        # capability): held to that schema alone.
        validate_def(entry.params, params, unstable=True)
        return entry.params
    _validate_both(entry.params, params)
    return entry.params


def validate_update(update: Any, session_id: str = "s-1") -> None:
    """One `session/update`'s update, as a `SessionNotification` of `session_id`, held to
    the schema that defines its kind as `validate_agent_message` holds it: the stable one
    (and the unstable one where that differs), or the unstable one alone for a kind only
    it has (so a test of a kind stable since a later release passes on either)."""
    params = {"sessionId": session_id, "update": update}
    validate_agent_message({"jsonrpc": "2.0", "method": "session/update", "params": params}, {})


@functools.cache
def _update_kinds(*, unstable: bool) -> frozenset[str]:
    """The `sessionUpdate` kinds of a schema's SessionUpdate."""
    variants = defs(unstable=unstable)["SessionUpdate"].get("oneOf", [])
    return frozenset(v.get("properties", {}).get("sessionUpdate", {}).get("const") for v in variants) - {None}


def _unstable_variant(params: Any) -> bool:
    update = params.get("update") if isinstance(params, dict) else None
    kind = update.get("sessionUpdate") if isinstance(update, dict) else None
    return (isinstance(kind, str) and kind not in _update_kinds(unstable=False)
            and kind in _update_kinds(unstable=True))


def _validate_both(name: str, instance: Any) -> None:
    """`instance` against the stable definition `name` where there is one, and against
    the unstable one too where that differs (module docstring)."""
    if name in defs():
        validate_def(name, instance)
    if extended_by_unstable(name):
        validate_def(name, instance, unstable=True)


def _validate_response(msg: Mapping[str, Any], pending: Mapping[RequestId, str]) -> str:
    if "id" not in msg:
        raise SchemaViolation(f"neither a request, a notification nor a response: {msg!r}")
    if ("result" in msg) == ("error" in msg):
        raise SchemaViolation(f"a response needs exactly one of result and error: {msg!r}")
    if set(msg) - {"jsonrpc", "id", "result", "error"}:
        raise SchemaViolation(f"unexpected members in a response: {msg!r}")
    msg_id = msg["id"]
    if "error" in msg:
        error = msg["error"]
        if not (
            isinstance(error, dict)
            and type(error.get("code")) is int
            and isinstance(error.get("message"), str)
        ):
            raise SchemaViolation(f"an error needs an integer code and a string message: {msg!r}")
        validate_def("Error", error)
        # An id of null answers a request that could not be read (parse error).
        if msg_id is not None and msg_id not in pending:
            raise SchemaViolation(f"error for an unknown request id {msg_id!r}: {msg!r}")
        return "error"
    if msg_id not in pending:
        raise SchemaViolation(f"result for an unknown request id {msg_id!r}: {msg!r}")
    method = pending[msg_id]
    if method.startswith("_"):
        return "extension"
    entry = method_table().get(method) or method_table(unstable=True).get(method)
    if entry is None or entry.side != "agent" or entry.result is None:
        raise SchemaViolation(f"the agent answered {method!r} with a result: {msg!r}")
    _validate_both(entry.result, msg["result"])
    return entry.result
