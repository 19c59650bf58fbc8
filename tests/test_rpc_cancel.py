"""`$/cancel_request`, handled inside rpc (acp_bridge.rpc.incoming), in-process: a
handler's cancel hook (`rpc.on_cancel`) is called in the reader instead of cancelling
its task; without a hook, or one that declines, the task is cancelled and answered
-32800; a cancel read in the same write as its request still reaches it once its task
has started; inside a batch too; an unknown id is logged and ignored; a cancel sent as
a request is answered null."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from acp_bridge.rpc import on_cancel
from acp_bridge.rpc.connection import Connection
from tests.support.rpc_pipes import FakeReader, FakeWriter, line

pytestmark = [pytest.mark.anyio,
              pytest.mark.filterwarnings("ignore:(read_text|open_text) is deprecated:DeprecationWarning")]

CANCELLED = {"code": -32800, "message": "Request cancelled", "data": {"code": "cancelled"}}


def cancel(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": request_id}}


def request(request_id: Any, method: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}}


class Turn:
    """A handler like a prompt's: it registers a hook that settles it (the hook returns
    `takes`), then waits to be settled; `calls` records who ran, in order."""

    def __init__(self, takes: bool = True) -> None:
        self.takes = takes
        self.started = anyio.Event()
        self.settled = anyio.Event()
        self.calls: list[str] = []

    async def prompt(self, **_: Any) -> str:
        def hook() -> bool:
            self.calls.append("hook")
            if self.takes:
                self.settled.set()
            return self.takes

        on_cancel(hook)
        self.started.set()
        await self.settled.wait()
        return "settled as cancelled"

    async def probe(self, **_: Any) -> list[str]:
        return list(self.calls)


async def serve(methods: dict[str, Callable[..., Any]], *writes: bytes, until: int) -> list[Any]:
    """Serve `methods`, feeding `writes` one after another once the connection runs;
    the messages written back once there are `until` of them."""
    reader, writer = FakeReader(), FakeWriter()
    conn = Connection(reader, writer, methods)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            # First jsonrpcserver is loaded (its answer to an invalid notification):
            # no request below waits for it.
            await reader.send.send(line({"jsonrpc": "1.0", "method": "warm/up"}))
            while not writer.messages():
                await anyio.sleep(0.001)
            for data in writes:
                await reader.send.send(data)
                await anyio.wait_all_tasks_blocked()
            while len(writer.messages()) < until + 1:
                await anyio.sleep(0.001)
            reader.send.close()
    return writer.messages()[1:]


async def test_a_hook_takes_the_cancel_in_the_reader_and_the_handler_answers() -> None:
    turn = Turn()
    answers = await serve({"session/prompt": turn.prompt, "probe": turn.probe},
                          line(request("p", "session/prompt")),
                          line(cancel("p"), request("after", "probe")), until=2)
    # The hook ran before the reader took the line after the cancel.
    assert {"jsonrpc": "2.0", "result": ["hook"], "id": "after"} in answers
    assert {"jsonrpc": "2.0", "result": "settled as cancelled", "id": "p"} in answers
    assert turn.calls == ["hook"]


async def test_a_hook_that_declines_leaves_the_task_cancelled() -> None:
    turn = Turn(takes=False)
    answers = await serve({"session/prompt": turn.prompt}, line(request("p", "session/prompt")),
                          line(cancel("p")), until=1)
    assert answers == [{"jsonrpc": "2.0", "id": "p", "error": CANCELLED}]
    assert turn.calls == ["hook"]


async def test_without_a_hook_the_task_is_cancelled() -> None:
    async def hang(**_: Any) -> None:
        await anyio.sleep_forever()

    answers = await serve({"hang": hang}, line(request(1, "hang")), line(cancel(1)), until=1)
    assert answers == [{"jsonrpc": "2.0", "id": 1, "error": CANCELLED}]


async def test_a_cancel_read_with_its_request_reaches_it_once_it_has_started() -> None:
    # Both in one write: the reader takes the cancel before the request's task has run
    # (nothing to cancel yet); it is left to a task that runs after it, which calls the
    # hook the handler has registered by then.
    turn = Turn()
    answers = await serve({"session/prompt": turn.prompt}, line(request("p", "session/prompt"), cancel("p")), until=1)
    assert answers == [{"jsonrpc": "2.0", "result": "settled as cancelled", "id": "p"}]
    assert turn.calls == ["hook"]


@pytest.mark.parametrize("takes", [True, False])
async def test_a_cancel_inside_a_batch(takes: bool) -> None:
    turn = Turn(takes=takes)
    (answer,) = await serve({"session/prompt": turn.prompt},
                            line([request("p", "session/prompt"), cancel("p")]), until=1)
    assert answer == ([{"jsonrpc": "2.0", "result": "settled as cancelled", "id": "p"}] if takes
                      else [{"jsonrpc": "2.0", "id": "p", "error": CANCELLED}])
    assert turn.calls == ["hook"]


async def test_a_cancel_of_an_unknown_request_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    async def ok(**_: Any) -> str:
        return "ok"

    caplog.set_level(logging.INFO, "acp_bridge.rpc.connection")
    answers = await serve({"ok": ok}, line(cancel("nope"), cancel({"not": "an id"}), request(1, "ok")), until=1)
    assert answers == [{"jsonrpc": "2.0", "result": "ok", "id": 1}]
    assert [r.getMessage() for r in caplog.records if "cancel_request" in r.getMessage()] == [
        "$/cancel_request for 'nope': no such request in flight",
        "$/cancel_request for {'not': 'an id'}: no such request in flight"]


async def test_a_cancel_sent_as_a_request_is_answered_null_after_cancelling() -> None:
    async def hang(**_: Any) -> None:
        await anyio.sleep_forever()

    answers = await serve({"hang": hang}, line(request(1, "hang")),
                          line({"jsonrpc": "2.0", "id": 2, "method": "$/cancel_request", "params": {"requestId": 1}}),
                          until=2)
    assert {"jsonrpc": "2.0", "result": None, "id": 2} in answers
    assert {"jsonrpc": "2.0", "id": 1, "error": CANCELLED} in answers


async def test_a_hook_registered_for_a_notification_is_not_kept() -> None:
    ran: list[str] = []

    def hook() -> bool:
        ran.append("hook")
        return True

    async def note(**_: Any) -> None:
        on_cancel(hook)  # nothing can name a notification
        ran.append("note")

    answers = await serve({"note": note}, line({"jsonrpc": "2.0", "method": "note", "params": {}}),
                          line(cancel(None)), until=0)
    assert answers == [] and ran == ["note"]
