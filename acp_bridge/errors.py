"""Every error acp-bridge raises on purpose, in one place (as httpx's `_exceptions.py`).

One base, `AcpBridgeError` (defined in session/errors.py, the lowest layer, so that the
persistence layer's family shares it):

    AcpBridgeError
    ├── SessionError            the session log and store (session/errors.py): not found,
    │                           locked, corrupt, version, store I/O, invalid id, ...; the
    │                           search index and its queries (search_index, search_query)
    ├── IndexDamaged            the search index's own file is damaged: the indexer makes it
    │                           again (session/errors.py; never a failure of a session)
    ├── IndexUnwritable         the search index cannot be written now (a full disk): the
    │                           indexer says so and searches read what it holds (likewise)
    ├── Rewound                 a log changed behind what the index read: the indexer reads
    │                           it again (session/errors.py; likewise)
    ├── RpcError                a JSON-RPC error response as it goes on the wire
    │                           (acp_bridge.rpc.protocol: the connection's own refusals, and
    │                           what `to_rpc_error` makes of every other error)
    ├── ClientError             the other side answered one of our requests with an error
    │                           (acp_bridge.rpc.protocol; its error object kept whole)
    ├── AgentGone               the agent a client talks to exited before it answered
    ├── InvalidParamsError      a request's params that its method cannot take
    ├── PromptInProgressError   a session's prompt is still running
    ├── AuthRequiredError       the session's model needs a key it does not have
    ├── TurnFailedError         a prompt whose turn ended `error` (its answer)
    ├── WrappedAgentError       `acp-bridge wrap`'s child misbehaved:
    │   ├── AgentExitedError        it exited while a request waited on it
    │   ├── AgentStartError         it cannot be (re)started
    │   └── AgentProtocolError      it answered something ACP does not allow
    ├── LifecycleError          a wrapped session's event its lifecycle has no rule for
    │                           (a bug of the wrapper's: acp_bridge.wrap.lifecycle)
    ├── RequestRefusedError     a request we do not serve now (the wrapped agent's while
    │                           acp-bridge seeds its session)
    │   └── ReplayError             the fake agent's recording cannot serve a prompt
    ├── MethodNotFoundError     a request for a method this side does not serve at all
    ├── ClientServiceError      a client's `fs/*` or `terminal/*` that failed (acp_bridge.client)
    │   ├── ClientResourceNotFoundError   the file or terminal it names is not there
    │   └── ClientParamsError             params the service cannot take
    ├── ModelSpecError          a `--model` spec that names no model we can make
    ├── ConfigError             a start-up value that cannot work (option, problem)
    ├── PriceFileError          a price file that cannot be read as prices (acp_bridge.prices)
    ├── ToolError               a tool call the model should see fail
    │   └── NotTextError            a file that is not UTF-8 text (acp_bridge.tools.base)
    ├── ToolMachineryError      a tool failed in a way the model cannot act on
    ├── CommandError            a slash command that cannot do what it says (its turn's
    │                           `error`: acp_bridge.host.commands)
    ├── AmbiguousIdError        a session id prefix more than one stored id starts with
    ├── ScenarioError           a snapshot scenario that cannot be run
    └── SnapshotMismatch        a snapshot check that found differences

Domain code raises these, never wire errors; each becomes a JSON-RPC error in one
function, acp_bridge.host.errors.to_rpc_error (codes and `data.code` words:
docs/protocol.md, "Errors"), which every connection is handed by its owner: the host's,
the wrapper's link to its child, and a client's connection to its agent (chat, the
snapshot driver, the demo). Errors a wrapped agent answers are passed on as they came
(`ClientError` keeps the peer's error object whole: acp_bridge.host.errors.relayed).
"""

from __future__ import annotations

from typing import Any

from session.errors import (
    AcpBridgeError as AcpBridgeError,  # the base, re-exported: the tree is here
)


class InvalidParamsError(AcpBridgeError):
    """A request's params that its method cannot take (-32602; `details.field`: the
    param)."""


class PromptInProgressError(AcpBridgeError):
    """A session's prompt is still running: a second prompt, or a load or resume of
    that session (-32001)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id} is already running a prompt; cancel it or wait")
        self.session_id = session_id


class AuthRequiredError(AcpBridgeError):
    """The session's model needs a key that is not there, or the provider refused the
    one there is (-32000, ACP's `auth_required`). The message names the variable or the
    command to run, never a key."""

    def __init__(self, message: str, methods: list[str]) -> None:
        super().__init__(message)
        self.methods = methods


class TurnFailedError(AcpBridgeError):
    """The answer of a prompt whose persisted `turn/end` says `error`: the JSON-RPC
    error object settlement gave it (acp_bridge.host.settlement), `code`, `message` and
    `data` if it has one (any JSON value: a wrapped agent's own), answered as it is."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["message"])
        self.code: int = error["code"]
        self.error = error


class WrappedAgentError(AcpBridgeError):
    """`acp-bridge wrap`'s child agent misbehaved (-32603 with `data.code`)."""

    code = "agent_error"


class AgentExitedError(WrappedAgentError):
    """The wrapped agent exited while a request was waiting on it (or before it was
    sent). The next request restarts it."""

    code = "agent_exited"

    def __init__(self, status: int | None) -> None:
        how = "exited" if status is None else f"exited with status {status}"
        super().__init__(f"the wrapped agent {how}; it is restarted at the next request", status=status)
        self.status = status


class AgentStartError(WrappedAgentError):
    code = "agent_start"


class AgentProtocolError(WrappedAgentError):
    code = "agent_protocol"


class LifecycleError(AcpBridgeError):
    """An event a wrapped session's lifecycle has no rule for in the state it is in
    (acp_bridge.wrap.lifecycle.step): a bug of the wrapper's, answered -32603."""


class RequestRefusedError(AcpBridgeError):
    """A request we do not serve now (-32603; `details.code` is the stable word)."""


class ReplayError(RequestRefusedError):
    """A recording that cannot serve a prompt (the fake agent): past its end, or a prompt
    that differs from the recorded one (`details`: `code`, `recording`)."""


class MethodNotFoundError(AcpBridgeError):
    """A request for a method this side does not serve (-32601); `details`, if any, are
    the error's `data` (the fake agent names the method)."""


class ClientServiceError(AcpBridgeError):
    """A request for a service a client offers its agent (`fs/*`, `terminal/*`) that
    failed: -32603 with the message alone. A client's answers to its agent are a code
    and words, no `data` (the agent hands the words to the model). `bug`: the failure is
    not one we expected (an exception of the handler's own, in its own words); its
    traceback is logged."""

    def __init__(self, message: str, *, bug: bool = False) -> None:
        super().__init__(message)
        self.bug = bug


class ClientResourceNotFoundError(ClientServiceError):
    """The file or terminal a client service request names is not there (-32002)."""


class ClientParamsError(ClientServiceError):
    """Params a client service cannot take: names its handler does not have, a path
    outside the workspace, a file that is not text (-32602)."""


class AgentGone(AcpBridgeError):
    """The agent a client talks to exited (its stdout ended) before it answered."""


class ModelSpecError(AcpBridgeError, ValueError):
    """A `--model` spec that names no model we can make."""


class ConfigError(AcpBridgeError):
    """A start-up value that cannot work: the option it came from, and why."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option}: {problem}")
        self.option = option
        self.problem = problem


class PriceFileError(AcpBridgeError, ValueError):
    """A price file that cannot be read as prices (acp_bridge.prices): names the first
    thing wrong; the start-up check makes it a ConfigError of `--prices`."""


class ToolError(AcpBridgeError):
    """An expected failure the model should see as an error result (bad arguments,
    missing file, path outside the roots, mismatch, timeout...). `code` is a short
    machine-readable word recorded in `tool/result.error`."""

    def __init__(self, message: str, *, code: str = "tool_error", name: str = "ToolError") -> None:
        super().__init__(message)
        self.code = code
        self.name = name


class ToolMachineryError(AcpBridgeError):
    """A tool failed in a way the model cannot act on: the step fails."""


class CommandError(AcpBridgeError):
    """A slash command that cannot do what it says (a missing argument, a file that
    cannot be written): the command's turn ends `error` with this message."""


class AmbiguousIdError(AcpBridgeError):
    """A session id prefix that more than one stored id starts with."""


class ScenarioError(AcpBridgeError, ValueError):
    """A scenario folder or file that cannot be run, or a run that went wrong."""


class SnapshotMismatch(AcpBridgeError, AssertionError):
    """A check whose traffic or re-persisted log differs from the golden."""
