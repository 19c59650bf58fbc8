"""`acp-bridge wrap -- acp-bridge serve`: the editor's cancel and its answer to a
permission request the wrapped agent asked for, read together (docs/wrap.md, "Cancel
and a permission answer").

ACP has an editor answer its open permission requests `cancelled` right after its
`session/cancel`, so both often come in one read. Whichever the wrapper's reader takes
first, the cancel wins, as in our own agent (docs/protocol.md): the turn is recorded
`cancelled {by}` with the editor's cancel, the answer is not recorded, the wrapped agent
is sent `session/cancel` and then `cancelled` for its request (never the editor's
answer, even an `allow_once`), and no `$/cancel_request` goes to the editor for the
request it answered. Every round leaves the same wire and the same two logs.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.support.acp_client import ClientPolicy, write_script
from tests.support.cancel_race import (
    check_cancelled_log,
    check_rounds_alike,
    permission_rounds_script,
    prompt_and_cancel_in_one_write,
    race_rounds,
)
from tests.support.logs import loaded_events
from tests.support.wrapped import WrappedProcess, serve_command

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROUNDS = 6


def wrapped_write(tmp_path: Path, policy: ClientPolicy) -> WrappedProcess:
    """A wrapper in front of our agent, whose model writes out.txt (so asks permission)."""
    model = write_script(tmp_path / "script.json", {"toolCalls": [
        {"id": "w1", "name": "write_file", "arguments": {"path": "out.txt", "content": "hi\n"}}]})
    return WrappedProcess(tmp_path / "store", serve_command(tmp_path / "inner-store", model), policy=policy)


def stored_sessions(store: Path) -> list[str]:
    return [p.stem for p in store.rglob("*.jsonl")]


@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancel-then-answer", "answer-then-cancel"])
@pytest.mark.parametrize("by", ["session/cancel", "$/cancel_request"])
async def test_the_editors_cancel_wins_over_its_permission_answer_in_either_order(
        tmp_path: Path, work: Path, cancel_first: bool, by: str) -> None:
    model = permission_rounds_script(tmp_path / "script.json", ROUNDS)
    inner = tmp_path / "inner-store"
    policy = ClientPolicy(hang_permissions=True)  # the test answers, with the cancel

    async with WrappedProcess(tmp_path / "store", serve_command(inner, model), policy=policy) as editor:
        await editor.initialize()
        sid = await editor.new_session(work)
        # Every other round the editor's answer would let the write run.
        rounds = await race_rounds(editor, policy, sid, ROUNDS, by, cancel_first=cancel_first,
                                   allow_every_other=True, drop_meta=True)
    assert editor.returncode == 0
    assert not (work / "out.txt").exists()
    check_rounds_alike(rounds)
    # The wrapper's log: every turn ended by the editor's cancel, no permission recorded.
    check_cancelled_log(loaded_events(tmp_path / "store", sid), ROUNDS, by)
    # The wrapped agent's own log: it read the session/cancel before the `cancelled`
    # answer the wrapper gave it, every round.
    (child_sid,) = stored_sessions(inner)
    child_events = loaded_events(inner, child_sid)
    assert [e["data"]["reason"] for e in child_events if e["type"] == "turn/end"] == [
        {"kind": "cancelled", "by": "session/cancel"}] * ROUNDS
    assert not any("permission" in e["data"] for e in child_events if e["type"] == "tool/result")


async def test_a_cancel_with_the_permission_unanswered_cancels_it_at_the_editor_under_our_id(
        tmp_path: Path, work: Path) -> None:
    # The editor cancels and never answers: the permission request it holds is
    # cancelled with one `$/cancel_request` naming the id the wrapper gave it, and the
    # turn ends by the cancel. (The child numbers its requests as the wrapper does, so
    # the child's own id would look the same here: that it is not passed on is pinned
    # by the test above, where the editor answered.)
    policy = ClientPolicy(hang_permissions=True)
    async with wrapped_write(tmp_path, policy) as editor:
        await editor.initialize()
        sid = await editor.new_session(work)
        async with anyio.create_task_group() as tg:
            answer = editor.prompt_soon(tg, sid, "write it")
            await editor.wait_for(lambda: bool(policy.asked))
            await editor.notify("session/cancel", {"sessionId": sid})
        await editor.wait_for(lambda: any(m.get("method") == "$/cancel_request"
                                          for d, m in editor.transcript if d == "<-"))
        await anyio.sleep(0.2)  # a second one, if any, would be on its way by now
    (asked,) = [m for d, m in editor.transcript if d == "<-" and m.get("method") == "session/request_permission"]
    cancels = [m["params"] for d, m in editor.transcript if d == "<-" and m.get("method") == "$/cancel_request"]
    assert cancels == [{"requestId": asked["id"]}]
    assert answer["result"]["_meta"]["acpBridge"]["reason"] == {"kind": "cancelled", "by": "session/cancel"}
    assert not (work / "out.txt").exists()
    assert editor.returncode == 0


@pytest.mark.parametrize("by", ["session/cancel", "$/cancel_request"])
async def test_a_cancel_in_the_write_of_its_prompt_cancels_it(tmp_path: Path, work: Path, by: str) -> None:
    # A cancel read with its prompt, before the prompt's task has started, is left to
    # a task (that runs after the prompt's has): the prompt still ends cancelled by it,
    # and nothing is written.
    policy = ClientPolicy(hang_permissions=True)
    async with wrapped_write(tmp_path, policy) as editor:
        await editor.initialize()
        sid = await editor.new_session(work)
        answer = await prompt_and_cancel_in_one_write(editor, sid, by)
    assert answer["result"]["_meta"]["acpBridge"]["reason"] == {"kind": "cancelled", "by": by}
    # The editor is not asked about a turn it cancelled (a permission request the child
    # makes after our session/cancel is answered `cancelled` by the wrapper).
    assert policy.asked == []
    assert not (work / "out.txt").exists()
    assert editor.returncode == 0
