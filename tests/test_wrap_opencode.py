"""`acp-bridge wrap` around a second real third-party ACP agent: opencode (`opencode acp`,
npm `opencode-ai`), with no key: its provider is an OpenAI-compatible fake model on
127.0.0.1 (tests/support/fake_model.py) given in OPENCODE_CONFIG_CONTENT.

`.ci/run` installs it pinned (OPENCODE_VERSION there) and runs this module (marker
`opencode`) with the executable in $ACP_BRIDGE_TEST_OPENCODE; without that variable it
skips and says why, so the README's test command needs no npm.

What it holds, live against the real agent: a text turn and a shell command turn reach
the editor as opencode sent them; `session/load` in a new wrapper replays exactly the
updates the editor saw (docs/wrap.md, "Replay"); the log holds opencode's own usage
from its prompt answers and the command as it last described it. With `bash: ask` in
its config (issue 35, point 6): a command it announces as `bash {cwd}` and then asks
about is recorded as the request names it, and its starting mode (a config option of
category `mode`, its only way of giving one) is each turn's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from session import check_invariants
from tests.support.acp_client import AgentProcess, ClientPolicy
from tests.support.acp_updates import without_offers, without_prompts
from tests.support.fake_model import respond
from tests.support.logs import loaded_events
from tests.support.sse_server import SSEServer
from tests.support.wrapped import WrappedProcess

OPENCODE_ENV = "ACP_BRIDGE_TEST_OPENCODE"
EXECUTABLE = os.environ.get(OPENCODE_ENV) or None
pytestmark = [
    pytest.mark.opencode,
    pytest.mark.anyio,
    pytest.mark.timeout(240),
    pytest.mark.skipif(EXECUTABLE is None, reason=(
        f"${OPENCODE_ENV} names no opencode executable (.ci/run installs opencode-ai from npm and sets it)")),
]
START = 120.0  # opencode starts its server on the first request: seconds, more on a busy box


def config(url: str, **more: Any) -> str:
    return orjson.dumps({
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                              "options": {"baseURL": url, "apiKey": "dummy"},
                              "models": {"fake-model": {"name": "Fake model", "tool_call": True}}}},
        "model": "fake/fake-model", "autoupdate": False, "share": "disabled", **more}).decode()


def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The store and the work folder (holding notes.txt); HOME a fresh folder, opencode
    told not to fetch or update anything."""
    store, work, home = tmp_path / "store", tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "notes.txt").write_text("notes for opencode\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENCODE_DISABLE_MODELS_FETCH", "1")
    monkeypatch.setenv("OPENCODE_DISABLE_AUTOUPDATE", "1")
    return store, work


async def settled(editor: AgentProcess, sid: str, quiet: float = 1.0, at_most: float = 30.0) -> list[Any]:
    """The session's updates once opencode has said all it says after its answers: it
    names the session (`session_info_update`, a title its model made from the first
    prompt) and sends its commands again whenever that is done, after the last answer
    on a busy machine. The wrapper records them, so a load replays them: the editor
    must have seen them too. Waited for (at most `at_most` seconds) until it named the
    session and `quiet` seconds passed with nothing new."""
    def named() -> bool:
        return any(u.get("sessionUpdate") == "session_info_update" for u in editor.updates_of(sid))

    seen, waited = -1, 0.0
    while (len(editor.updates_of(sid)) != seen or not named()) and waited < at_most:
        seen = len(editor.updates_of(sid))
        await anyio.sleep(quiet)
        waited += quiet
    return editor.updates_of(sid)


async def test_opencode_wrapped_turns_replay_as_sent_and_record_what_it_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert EXECUTABLE is not None
    store, work = folders(tmp_path, monkeypatch)
    with SSEServer(respond) as model:
        monkeypatch.setenv("OPENCODE_CONFIG_CONTENT", config(model.url))
        child = [EXECUTABLE, "acp"]
        async with WrappedProcess(store, child, cwd=work) as editor:
            init = await editor.request("initialize", {"protocolVersion": 1, "clientCapabilities": {},
                                                       "clientInfo": {"name": "tests", "version": "0"}}, timeout=START)
            assert init["agentInfo"]["name"] == "OpenCode"
            sid = (await editor.request("session/new", {"cwd": str(work), "mcpServers": []}, timeout=START))["sessionId"]
            hello = await editor.prompt(sid, "Say hello.", timeout=START)
            ran = await editor.prompt(sid, "RUN: cat notes.txt", timeout=START)
            await settled(editor, sid)
        live = editor.updates_of(sid)  # all the editor was sent (read to the end of the wrapper's stdout)
        assert hello["stopReason"] == ran["stopReason"] == "end_turn"
        said = "".join(u["content"]["text"] for u in live if u["sessionUpdate"] == "agent_message_chunk")
        assert said.startswith("Hello from the fake model.")
        finals = [u for u in live if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "completed"]
        assert finals and "notes for opencode" in orjson.dumps(finals[-1]["content"]).decode()
        async with WrappedProcess(store, child, cwd=work) as second:
            await second.request("initialize", {"protocolVersion": 1, "clientCapabilities": {},
                                                "clientInfo": {"name": "tests", "version": "0"}}, timeout=START)
            await second.request("session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []},
                                 timeout=START)
            replayed = second.replayed(sid)
    # What opencode says after the editor hung up (it may name the session only as it is
    # stopped) is recorded, so a load replays it, but it was never sent to that editor:
    # the replay is the live stream and, after it, at most such late titles and commands.
    shown, again = without_offers(live), without_prompts(replayed)
    assert again[:len(shown)] == shown
    assert {u["sessionUpdate"] for u in again[len(shown):]} <= {"session_info_update", "available_commands_update"}
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    usage = [e["data"]["usage"] for e in events if e["type"] == "assistant/message" and "usage" in e["data"]]
    answered = [a.get("usage") for a in (hello, ran)]
    assert [{"inputTokens": u["inputTokens"], "outputTokens": u["outputTokens"]} for u in usage] == \
        [{"inputTokens": a["inputTokens"], "outputTokens": a["outputTokens"]} for a in answered if a]
    [call] = [e["data"] for e in events if e["type"] == "tool/call"]
    last_input = [u["rawInput"] for u in live if u.get("toolCallId") == call["callId"] and "rawInput" in u][-1]
    assert call["arguments"] == last_input and "cat notes.txt" in orjson.dumps(last_input).decode()


async def test_opencode_a_command_it_asks_about_is_recorded_as_asked_in_its_starting_mode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert EXECUTABLE is not None
    store, work = folders(tmp_path, monkeypatch)
    policy = ClientPolicy(permissions=["once", "once"])
    with SSEServer(respond) as model:
        monkeypatch.setenv("OPENCODE_CONFIG_CONTENT", config(model.url, permission={"bash": "ask"}))
        async with WrappedProcess(store, [EXECUTABLE, "acp"], cwd=work, policy=policy) as editor:
            await editor.request("initialize", {"protocolVersion": 1, "clientCapabilities": {},
                                                "clientInfo": {"name": "tests", "version": "0"}}, timeout=START)
            new = await editor.request("session/new", {"cwd": str(work), "mcpServers": []}, timeout=START)
            sid = new["sessionId"]
            for command in ("touch made.txt", "cat notes.txt"):
                assert (await editor.prompt(sid, f"RUN: {command}", timeout=START))["stopReason"] == "end_turn"
    [mode] = [o["currentValue"] for o in new["configOptions"] if o.get("category") == "mode"]
    assert "modes" not in new  # opencode gives its mode only as a config option
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert [e["data"].get("mode") for e in events if e["type"] == "turn/start"] == [mode, mode]
    calls = [e["data"] for e in events if e["type"] == "tool/call"]
    asked = [a["toolCall"] for a in policy.asked]
    assert len(asked) == len(calls) == 2
    for call, request in zip(calls, asked, strict=True):
        assert (call["title"], call["arguments"]) == (request["title"], request["rawInput"])
    assert [c["title"] for c in calls] == ["touch made.txt", "cat notes.txt"]
