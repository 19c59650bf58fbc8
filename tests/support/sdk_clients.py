"""The official ACP SDK clients as the drivers of an agent under test
(tests/test_sdk_clients.py, tests/test_sdk_client_rules.py): one interface, `SdkClient`,
over the TypeScript SDK (tests/support/ts_client.py: a Node script on the installed
package) and the Python SDK (tests/support/py_sdk_client.py).

A driver starts the agent, sends what a test asks through the SDK's own connection, and
keeps every message either way in the order it saw them (`traffic`). Its own verdicts:

- the SDK's schemas took every message the agent sent (zod in TypeScript, pydantic in
  Python) and kept every value of it (`sdk_problems`: a value the SDK would have put a
  default in place of is one);
- the SDK delivered every `session/update` to the client's handler (`delivered`);

and `check_traffic`, when the agent is closed, the suite's: every message the agent sent
is valid against the vendored v1.25 schema (tests/support/acp_schema.py: the stable
definitions for a stable method, the unstable ones for the others), and every request the
client sent whose id can be read was answered exactly once, with that id.
"""

from __future__ import annotations

import abc
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from tests.support.acp_schema import RequestId, SchemaViolation, validate_agent_message
from tests.support.waiting import until

IN, OUT = "in", "out"
# The ways a client cancels a running prompt (SdkClient.start's `cancel_at_chunk`).
CANCELS = ("session/cancel", "$/cancel_request", "session/close")


class SdkRequestError(Exception):
    """The agent answered a request of the client with an error (as the SDK raised it)."""

    def __init__(self, code: int | None, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


@dataclass
class Pending:
    """A request of the client in flight: its answer, once it came."""

    method: str
    tag: str = ""  # the driver's own name for it
    request_id: RequestId = None  # its JSON-RPC id, where the driver learns it
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: SdkRequestError | None = None
    took: float | None = None  # seconds from sending it to its answer, by the client's clock
    close: Pending | None = None  # the `session/close` that cancelled it (`cancel_at_chunk`)

    async def answer(self, timeout: float = 30) -> Any:
        with anyio.fail_after(timeout):
            await self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result

    def settle(self, result: Any = None, error: SdkRequestError | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


def compare(value: Any, parsed: Any, path: str = "") -> tuple[list[str], list[str]]:
    """What an SDK's schema made of `value` (`parsed`, as it would write it again): the
    paths it changed (a default in place of a malformed value, invalid items skipped) and
    those it dropped as unknown to it (newer than the SDK); what it added is not counted."""
    changed: list[str] = []
    unknown: list[str] = []

    def walk(value: Any, parsed: Any, path: str) -> None:
        if isinstance(value, dict):
            if not isinstance(parsed, dict):
                changed.append(path or "<root>")
                return
            for key, item in value.items():
                at = f"{path}.{key}" if path else key
                if key in parsed:
                    walk(item, parsed[key], at)
                else:
                    unknown.append(at)
        elif isinstance(value, list):
            if not isinstance(parsed, list) or len(parsed) != len(value):
                changed.append(path or "<root>")
                return
            for i, item in enumerate(value):
                walk(item, parsed[i], f"{path}[{i}]")
        elif not (type(value) is type(parsed) and value == parsed):
            changed.append(path or "<root>")

    walk(value, parsed, path)
    return changed, unknown


def readable(request_id: Any) -> bool:
    """An id a JSON-RPC peer can answer with: a string or an integer (not a boolean)."""
    return isinstance(request_id, str) or type(request_id) is int


class SdkClient(abc.ABC):
    """One official SDK client driving one agent process."""

    label: str  # e.g. "typescript 2.4.0", "python 0.12.1"

    def __init__(self) -> None:
        self.traffic: list[tuple[str, Any]] = []  # (IN | OUT, the message; raw text if not JSON)
        self.delivered: list[dict[str, Any]] = []  # session/update params the SDK handed the client
        self.asked: list[tuple[str, dict[str, Any]]] = []  # the agent's requests the SDK handed it
        self.sdk_problems: list[str] = []
        self.sdk_unknown: set[str] = set()  # members the SDK's schemas do not know (newer than it)
        self.permissions: list[str] = []  # option kinds to choose, in order ("cancelled" too)
        self.elicitations: list[dict[str, Any]] = []  # elicitation answers, in order
        self.exit_code: int | None = None
        self.raw_ids: dict[RequestId, str] = {}  # ids of the raw lines written (`raw`)

    # --- what a test does ---------------------------------------------------------------

    @abc.abstractmethod
    def start(self, method: str, params: Mapping[str, Any], *, cancel_at_chunk: str | None = None) -> Pending:
        """Send `method` through the SDK; its answer comes on the returned Pending.
        `cancel_at_chunk` (a prompt's): the client cancels it as soon as it sees the
        first `agent_message_chunk` of its session, by "session/cancel",
        "$/cancel_request" or "session/close" (whose own Pending is `close`), as a person
        pressing stop would: decided in the client as the chunk comes, not by the test,
        which sees the traffic later."""

    async def request(self, method: str, params: Mapping[str, Any], *, timeout: float = 30) -> Any:
        return await self.start(method, params).answer(timeout)

    @abc.abstractmethod
    async def cancel_request(self, pending: Pending) -> None:
        """Cancel a request in flight the SDK's way (`$/cancel_request`)."""

    @abc.abstractmethod
    async def notify(self, method: str, params: Mapping[str, Any]) -> None: ...

    async def raw(self, text: str, request_id: RequestId = None) -> None:
        """Write `text` to the agent as one line, past the SDK (`request_id`: the id it
        carries, whose answers are not handed to the SDK, and which `check_traffic` holds
        to be answered once even where the line is not JSON)."""
        if request_id is not None:
            self.raw_ids[request_id] = "(a raw line)"
        await self._write_raw(text, request_id)

    @abc.abstractmethod
    async def _write_raw(self, text: str, request_id: RequestId) -> None: ...

    async def answer_with(self, *, permissions: list[str] | None = None,
                          elicitations: list[dict[str, Any]] | None = None) -> None:
        """What the client answers the agent's next permission requests (option kinds, or
        "cancelled") and elicitations; once they are used up, "cancelled" and "decline"."""
        if permissions is not None:
            self.permissions = list(permissions)
        if elicitations is not None:
            self.elicitations = list(elicitations)

    @abc.abstractmethod
    async def close(self) -> int:
        """Close the agent's stdin and wait for its exit (its code)."""

    # --- what a test reads ------------------------------------------------------------

    def received(self, since: int = 0) -> list[Any]:
        """The agent's messages, from position `since` of `traffic` on."""
        return [m for d, m in self.traffic[since:] if d == IN]

    def updates(self, session_id: str, since: int = 0) -> list[dict[str, Any]]:
        return [m["params"]["update"] for m in self.received(since) if isinstance(m, dict)
                and m.get("method") == "session/update" and m["params"].get("sessionId") == session_id]

    def text(self, session_id: str, kind: str = "agent_message_chunk", since: int = 0) -> str:
        return "".join(u["content"].get("text", "") for u in self.updates(session_id, since)
                       if u["sessionUpdate"] == kind)

    def answer_position(self, request_id: RequestId) -> int:
        """The position in `traffic` of the agent's answer to `request_id`."""
        for i, (direction, message) in enumerate(self.traffic):
            if direction == IN and isinstance(message, dict) and "method" not in message \
                    and message.get("id") == request_id:
                return i
        raise AssertionError(f"no answer to {request_id!r} in {self.label}'s traffic")

    def sent_id(self, method: str, nth: int = -1) -> RequestId:
        """The id of the client's `nth` request of `method` (None before it went out)."""
        ids = [m["id"] for d, m in self.traffic if d == OUT and isinstance(m, dict)
               and m.get("method") == method and "id" in m]
        return ids[nth] if -len(ids) <= nth < len(ids) else None

    async def until(self, ready: Callable[[], Any], why: str, timeout: float = 15) -> Any:
        return await until(ready, f"{why} ({self.label})", timeout=timeout)

    # --- the verdicts ---------------------------------------------------------------------

    def check_traffic(self) -> None:
        """The suite's checks of the whole run (module docstring): AssertionError naming
        every one that failed."""
        problems: list[str] = []
        sent: dict[RequestId, str] = {}
        answers: Counter[str] = Counter()
        for direction, message in self.traffic:
            if not isinstance(message, dict):
                continue
            if direction == OUT and "method" in message and readable(message.get("id")):
                sent[message["id"]] = message["method"]
            elif direction == IN and "method" not in message:
                answers[json.dumps(message.get("id"))] += 1
        sent.update({i: m for i, m in self.raw_ids.items() if i not in sent})
        for direction, message in self.traffic:
            if direction != IN:
                continue
            if not isinstance(message, dict):
                problems.append(f"a line that is not a JSON object: {message!r:.200}")
                continue
            try:
                validate_agent_message(message, sent)
            except SchemaViolation as exc:
                problems.append(f"the v1.25 schema: {exc}")
        twice = {key: n for key, n in answers.items() if n > 1}
        never = [i for i in sent if answers[json.dumps(i)] == 0]
        if twice or never:
            problems.append(f"requests answered more than once: {twice}; never: {never}")
        problems += [f"the SDK's schemas: {problem}" for problem in self.sdk_problems]
        updates = [m for m in self.received() if isinstance(m, dict) and m.get("method") == "session/update"]
        if len(self.delivered) != len(updates):
            problems.append(f"the SDK delivered {len(self.delivered)} of {len(updates)} session/update notifications")
        assert not problems, f"{self.label}:\n" + "\n".join(problems)
