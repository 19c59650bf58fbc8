"""What a tool is, what it returns, and the client services it runs through.

A tool never touches the file system or spawns a process directly: it asks
`ClientServices`, which the ACP server implements with the client's `fs/*` and
`terminal/*` methods when the client advertises them, and `LocalServices`
(tools/local.py) implements on this machine otherwise. Path confinement is the tool's
job (tools/paths.py), before any service is asked, whichever services run it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from acp_bridge.errors import ToolError

ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"]
JSON = Any


class NotTextError(ToolError):
    """The file is not UTF-8 text, so it cannot be handed over as text without changing
    it: `binary` if it holds NUL bytes, else bytes that are not UTF-8 (e.g. Latin-1).
    `size` is its size in bytes when known. Services raise it from `read_text_file`;
    each tool says what it refuses to do (`refusal`)."""

    def __init__(self, path: Path, *, size: int | None, binary: bool, detail: str = "") -> None:
        self.path = path
        self.size = size
        self.binary = binary
        self.detail = detail
        super().__init__(self.refusal("not shown"), code="binary_file" if binary else "not_utf8")

    def refusal(self, what: str) -> str:
        """The message for a tool that will not touch the file, e.g. "PATH is a binary
        file (N bytes); not shown"."""
        kind = "a binary file" if self.binary else "not UTF-8 text"
        facts = [f"{self.size} bytes"] if self.size is not None else []
        if self.detail:
            facts.append(self.detail)
        shown = f" ({'; '.join(facts)})" if facts else ""
        return f"{self.path} is {kind}{shown}; {what}"


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None
    signal: str | None = None


@dataclass(frozen=True)
class TerminalOutput:
    output: str
    truncated: bool
    exit_status: ExitStatus | None = None


class Terminal(Protocol):
    """A running command (ACP terminal semantics)."""

    @property
    def terminal_id(self) -> str | None:
        """The client's terminal id (shown as `{type: "terminal"}` content), or None
        for a local process."""

    async def wait_for_exit(self) -> ExitStatus: ...

    async def output(self) -> TerminalOutput: ...

    async def kill(self) -> None: ...

    async def release(self) -> None: ...


@dataclass(frozen=True)
class PermissionRequest:
    """What the runner asks the client before an edit or a command."""

    call_id: str
    title: str
    kind: ToolKind
    raw_input: JSON
    locations: Sequence[Mapping[str, JSON]] = ()
    name: str | None = None  # the tool's own name (ACP ToolCall.name, v1.22)
    content: Sequence[Mapping[str, JSON]] = ()  # e.g. the diff about to be applied
    # The options offered (ACP PermissionOption), the "always" one named by what it
    # allows (tools.permissions.options_for); empty: tools.permissions.OPTIONS.
    options: Sequence[Mapping[str, str]] = ()


@dataclass(frozen=True)
class PermissionOutcome:
    """The client's answer: an option `selected` or the request `cancelled` (ACP's
    outcomes), or no usable answer: an `error` answer (its JSON-RPC `code` and
    `message`) or an `invalid` one (not an option offered: `message` says what came)."""

    outcome: Literal["selected", "cancelled", "error", "invalid"]
    option_id: str | None = None
    code: int | None = None
    message: str | None = None


class WorkspaceServices(Protocol):
    """The files and commands of a session, as its tools reach them."""

    async def read_text_file(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        """The file's text exactly as it is on disk (line endings and a BOM kept), so
        that writing it back changes no byte. NotTextError if it is not UTF-8 text
        (never U+FFFD in place of bytes); FileNotFoundError / ToolError if it cannot be
        read."""

    async def write_text_file(self, path: Path, content: str) -> None: ...

    async def create_terminal(
        self, command: str, *, cwd: Path, output_byte_limit: int, env: Mapping[str, str] | None = None
    ) -> Terminal:
        """Start `command` through the shell in `cwd`."""


class ClientServices(WorkspaceServices, Protocol):
    """The outside world of a session, as the agent may use it: the workspace, and the
    person behind the client who answers permission requests and what an MCP server
    asks them."""

    async def request_permission(self, request: PermissionRequest) -> PermissionOutcome: ...

    async def elicit(self, call_id: str, request: Mapping[str, JSON]) -> dict[str, JSON]:
        """Ask the person what an MCP server asks during the call `call_id`: `request`
        is ACP's `elicitation/create` without the session (`mode`, `message`,
        `requestedSchema` or `url` and `elicitationId`); the answer is ACP's (`action`
        accept, decline or cancel; `content` with accept). A client that cannot show
        that mode, or that fails, is an answer too (decline, cancel): never raises but
        cancellation."""

    def elicitation_complete(self, elicitation_id: str) -> None:
        """Tell the client that the URL-mode elicitation `elicitation_id` it was shown is
        complete (ACP `elicitation/complete`), if it shows URL elicitations."""


Elicit = Callable[[Mapping[str, JSON]], Awaitable[dict[str, JSON]]]
"""A call's way to `ClientServices.elicit` (its call id bound), for the MCP tools."""

ElicitationDone = Callable[[str], None]
"""An elicitation asked in URL mode is complete (the MCP server said so): its id."""


@dataclass(frozen=True)
class ToolContext:
    """Where a tool runs: the session's roots and the services to reach them."""

    cwd: Path
    roots: tuple[Path, ...]  # cwd first, then the additional directories
    services: WorkspaceServices
    # Called by long-running tools with partial ACP ToolCallContent (e.g. a terminal
    # embed) so the client can show progress; may be None.
    progress: Callable[[list[JSON]], Awaitable[None]] | None = None
    # What plan() showed for permission, by call (tool name and arguments): an edit's
    # (old text, new text), so that run() writes exactly that or nothing. The runner
    # makes one ToolContext per call and hands it to plan() and then run().
    shown: dict[str, tuple[str | None, str]] = field(default_factory=dict, compare=False, repr=False)
    # Asks the person for input an MCP server requests during the call (None: nobody
    # to ask, the request is declined); each request and its answer is appended to
    # `elicited`, which the call's `tool/result` records, whatever the call's outcome.
    elicit: Elicit | None = None
    elicited: list[JSON] = field(default_factory=list, compare=False, repr=False)
    # An elicitation the call asked in URL mode is complete, while the call runs: its
    # `elicited` entry marked, the client told (after the call the server's own
    # `completed` tells the client alone: acp_bridge.tools.mcp_session).
    completed: ElicitationDone | None = None


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's answer: `content` is what the model sees (text blocks), `display` the
    ACP ToolCallContent shown to the person (diffs, terminals, full output)."""

    content: list[JSON]
    is_error: bool = False
    display: list[JSON] = field(default_factory=list)
    error: Mapping[str, str] | None = None  # {name, code} for error results

    @classmethod
    def text(cls, text: str, *, is_error: bool = False, display: list[JSON] | None = None) -> ToolOutcome:
        return cls([{"type": "text", "text": text}], is_error=is_error, display=display or [])

    @classmethod
    def failure(cls, error: ToolError) -> ToolOutcome:
        return cls(
            [{"type": "text", "text": error.message}],
            is_error=True,
            error={"name": error.name, "code": error.code},
        )


@dataclass(frozen=True)
class ToolPlan:
    """What a call will do, worked out before permission is asked: its title, kind and
    locations for the `tool/call` event, and display content (a diff) for the prompt."""

    title: str
    kind: ToolKind
    locations: list[dict[str, JSON]] = field(default_factory=list)
    preview: list[JSON] = field(default_factory=list)


class Tool(Protocol):
    name: str
    kind: ToolKind
    description: str
    parameters: Mapping[str, JSON]  # JSON Schema of the arguments

    async def plan(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolPlan:
        """Validate arguments and describe the call (edits read the file to preview
        the diff). Raises ToolError. Does not change anything."""

    async def run(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolOutcome:
        """Do it. Raises ToolError for expected failures; anything else is a tool
        machinery failure that ends the turn with an error."""
