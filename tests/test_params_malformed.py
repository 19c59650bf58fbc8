"""Schema v1.25.0, "reject malformed values receivers act on" (#2333): the fields whose
`x-deserialize-default-on-error` / `x-deserialize-skip-invalid-items` markers that release
dropped (tests/support/acp/SOURCE.txt) are refused, -32602 naming the field, by the one
params check (acp_bridge.host.params), where a lenient receiver would have put a default
in place of the value or skipped the bad items. Each row is one such field with one
malformed value; the vendored schema refuses the same params, and a well-formed value
beside it is taken.

Where acp-bridge is the receiver: the agent's `session/new`, `load`, `resume` and `fork`
(`mcpServers`, `additionalDirectories`); a client of ours (`acp-bridge chat`, the
snapshot driver) for `fs/read_text_file` (`line`, `limit`) and `terminal/create` (`args`,
`env`, `cwd`, `outputByteLimit`). `AuthMethodTerminal.args`/`env` come to a client in an
`initialize` answer, and no client of ours acts on them (chat does not run terminal
logins): nothing to refuse there. The wrapper passes a child's `fs/*` and `terminal/*` on
to the editor unread: the editor is their receiver.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from jsonschema import Draft202012Validator, FormatChecker

from acp_bridge.client.methods import ClientMethods
from acp_bridge.errors import ClientParamsError, InvalidParamsError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.params import check_client_params, check_params
from tests.support.acp_schema import defs, method_table

SERVER = {"name": "s", "command": "/bin/true", "args": [], "env": []}
NEW = {"cwd": "/w", "mcpServers": []}
LOAD = {"sessionId": "s1", "cwd": "/w", "mcpServers": []}
RESUME = {"sessionId": "s1", "cwd": "/w"}
FORK = {"sessionId": "s1", "cwd": "/w"}

# (method, well-formed params, the field, a malformed value, the field the answer names)
AGENT_CASES: list[tuple[str, dict[str, Any], str, Any, str]] = [
    *[(method, base, "mcpServers", bad, named)
      for method, base in (("session/new", NEW), ("session/load", LOAD),
                           ("session/resume", RESUME), ("session/fork", FORK))
      for bad, named in ((None, "mcpServers"), ({"s": SERVER}, "mcpServers"),
                         ([SERVER, "not a server"], "mcpServers[1]"),
                         ([{**SERVER, "args": None}], "mcpServers[0].args"))],
    *[(method, base, "additionalDirectories", bad, named)
      for method, base in (("session/new", NEW), ("session/load", LOAD),
                           ("session/resume", RESUME), ("session/fork", FORK))
      for bad, named in ((None, "additionalDirectories"), ("/extra", "additionalDirectories"),
                         (["/extra", 7], "additionalDirectories[1]"))],
]
READ = {"sessionId": "s1", "path": "/w/a.txt"}
CREATE = {"sessionId": "s1", "command": "/bin/true"}
CLIENT_CASES: list[tuple[str, dict[str, Any], str, Any, str]] = [
    ("fs/read_text_file", READ, "line", "3", "line"),
    ("fs/read_text_file", READ, "line", -1, "line"),
    ("fs/read_text_file", READ, "line", 2.5, "line"),
    ("fs/read_text_file", READ, "limit", True, "limit"),
    ("fs/read_text_file", READ, "limit", 2**32, "limit"),
    ("terminal/create", CREATE, "args", None, "args"),
    ("terminal/create", CREATE, "args", "-c ls", "args"),
    ("terminal/create", CREATE, "args", ["-c", 1], "args[1]"),
    ("terminal/create", CREATE, "env", None, "env"),
    ("terminal/create", CREATE, "env", {"A": "1"}, "env"),
    ("terminal/create", CREATE, "env", [{"name": "A", "value": 1}], "env[0].value"),
    ("terminal/create", CREATE, "cwd", 7, "cwd"),
    ("terminal/create", CREATE, "outputByteLimit", "1000", "outputByteLimit"),
    ("terminal/create", CREATE, "outputByteLimit", -1, "outputByteLimit"),
]


def ids(cases: list[tuple[str, dict[str, Any], str, Any, str]]) -> list[str]:
    return [f"{method}-{field}={bad!r}" for method, _, field, bad, _ in cases]


# The integer formats of the schema, which a validator asserts only when asked to: a
# receiver that reads `line` into a u32 cannot take 2**32.
FORMATS = FormatChecker()
for _name, _bits in (("uint16", 16), ("uint32", 32), ("uint64", 64)):
    FORMATS.checks(_name)(lambda v, bits=_bits: not isinstance(v, int) or 0 <= v < 2**bits)


def schema_refuses(method: str, params: dict[str, Any]) -> bool:
    """Whether the vendored v1.25 schema's definition of `method`'s params (the unstable
    one for a method only it has) refuses `params`, formats included."""
    unstable = method not in method_table()
    entry = method_table(unstable=unstable)[method]
    schema = {"$defs": defs(unstable=unstable), "$ref": f"#/$defs/{entry.params}"}
    return not Draft202012Validator(schema, format_checker=FORMATS).is_valid(params)


@pytest.mark.parametrize(("method", "base", "field", "bad", "named"), AGENT_CASES, ids=ids(AGENT_CASES))
def test_the_agent_refuses_a_malformed_value_naming_the_field(
        method: str, base: dict[str, Any], field: str, bad: Any, named: str) -> None:
    check_params(method, base)  # the same request, well formed, is taken
    params = {**base, field: bad}
    assert schema_refuses(method, params)
    with pytest.raises(InvalidParamsError) as raised:
        check_params(method, params)
    wire = to_rpc_error(raised.value).to_json()
    assert wire["code"] == -32602 and wire["data"] == {"code": "invalid_params", "field": named,
                                                       **raised.value.details}
    assert named in wire["message"]


@pytest.mark.parametrize(("method", "base", "field", "bad", "named"), CLIENT_CASES, ids=ids(CLIENT_CASES))
def test_a_client_of_ours_refuses_a_malformed_value_naming_the_field(
        method: str, base: dict[str, Any], field: str, bad: Any, named: str) -> None:
    check_client_params(method, base)
    params = {**base, field: bad}
    assert schema_refuses(method, params)
    with pytest.raises(ClientParamsError) as raised:
        check_client_params(method, params)
    # A client answers its agent with a code and words, no `data` (docs/protocol.md, "Errors").
    assert to_rpc_error(raised.value).to_json() == {"code": -32602, "message": raised.value.message}
    assert raised.value.message.startswith(f"invalid params: {named} ")


# Well-formed values the schema takes: null where its type allows null, nothing else.
TAKEN: list[tuple[str, dict[str, Any]]] = [
    ("session/new", {**NEW, "additionalDirectories": []}),
    ("session/resume", {**RESUME, "mcpServers": [], "additionalDirectories": ["/x"]}),
    ("session/list", {"cwd": None, "cursor": None}),
    ("initialize", {"protocolVersion": 1, "clientInfo": None}),
]
CLIENT_TAKEN: list[tuple[str, dict[str, Any]]] = [
    ("fs/read_text_file", {**READ, "line": None, "limit": None}),
    ("fs/read_text_file", {**READ, "line": 0, "limit": 2**32 - 1}),
    ("terminal/create", {**CREATE, "args": [], "env": [], "cwd": None, "outputByteLimit": None}),
    ("terminal/create", {**CREATE, "args": ["-c", "ls"], "env": [{"name": "A", "value": "1"}],
                         "cwd": "/w", "outputByteLimit": 0}),
]


@pytest.mark.parametrize(("method", "params"), TAKEN + CLIENT_TAKEN, ids=[m for m, _ in TAKEN + CLIENT_TAKEN])
def test_what_the_schema_takes_is_taken(method: str, params: dict[str, Any]) -> None:
    assert not schema_refuses(method, params)
    (check_client_params if "/" in method and method.split("/")[0] in ("fs", "terminal") else check_params)(
        method, params)


def test_client_capabilities_null_is_still_absent() -> None:
    """`InitializeRequest.clientCapabilities` keeps its default-on-error marker in v1.25: a
    null is the default (no capabilities), as before."""
    check_params("initialize", {"protocolVersion": 1, "clientCapabilities": None})
    with pytest.raises(InvalidParamsError):
        check_params("initialize", {"protocolVersion": 1, "clientCapabilities": "all"})


@pytest.mark.anyio
async def test_a_client_refuses_before_it_acts() -> None:
    """Through a client's dispatch: the malformed `args` of `terminal/create` are refused
    before anything runs (in the unit tier, a process start would fail the test), where
    before a string was spread into one argument per character."""
    async def no_question(**_: Any) -> Any:
        raise AssertionError("not asked")

    async with anyio.create_task_group() as tg:
        methods = ClientMethods(tg, no_question, check=check_client_params)
        with pytest.raises(ClientParamsError, match=r"invalid params: args must be an array"):
            await methods.serve("terminal/create", {**CREATE, "args": "-c ls"})
        with pytest.raises(ClientParamsError, match=r"invalid params: line must be an integer"):
            await methods.serve("fs/read_text_file", {**READ, "line": "3"})
