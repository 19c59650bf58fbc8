"""Issue 16 item 3, images: `promptCapabilities.image`, image blocks in the log (one
copy of the same bytes per prompt), replayed on load, sent to an `openai:` model as
`image_url` parts (checked on the loopback OpenAI-compatible server), and refused with
-32602 when the session's model cannot take them."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.content import compact_images, expand_images
from acp_bridge.models.openai_request import request_body, user_content
from tests.support.acp_client import AgentError, AgentProcess, normalized
from tests.support.acp_schema import validate_def
from tests.support.logs import loaded_events
from tests.support.sse_server import SSEServer, text_reply

pytestmark = pytest.mark.anyio

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
# A second, bigger image: its bytes are what the log must hold only once.
SHOT = base64.b64encode(bytes(range(256)) * 64).decode()


def image(data: str, mime: str = "image/png", **extra: Any) -> dict[str, Any]:
    return {"type": "image", "data": data, "mimeType": mime, **extra}


PROMPT = [{"type": "text", "text": "what differs?"}, image(SHOT), image(PNG), image(SHOT, annotations={"priority": 1})]


# --- pure: the log's compact form and the OpenAI wire format -------------------------------


def test_compact_keeps_each_image_once_and_expand_restores_the_prompt() -> None:
    compact = compact_images(PROMPT)
    assert compact[:3] == PROMPT[:3]
    assert compact[3] == {"type": "image", "data": "", "mimeType": "image/png", "annotations": {"priority": 1},
                          "_meta": {"acpBridge": {"sameAs": 1}}}
    assert expand_images(compact) == PROMPT
    for block in compact:
        validate_def("ContentBlock", block)  # the compact form is still a valid ACP block
    # The same bytes under another type are another image; a client's own _meta stays.
    other = [image(PNG, _meta={"x": 1}), image(PNG, "image/gif"), image(PNG, _meta={"x": 2})]
    compact = compact_images(other)
    assert compact[1]["data"] == PNG and compact[2]["_meta"] == {"x": 2, "acpBridge": {"sameAs": 0}}
    assert expand_images(compact) == other
    assert expand_images([image("", _meta={"acpBridge": {"sameAs": 5}})])[0]["data"] == ""  # dangling: left


def test_openai_wire_format_for_images() -> None:
    parts = user_content(compact_images(PROMPT), images=True)
    assert parts == [
        {"type": "text", "text": "what differs?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{SHOT}"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{SHOT}"}},
    ]
    web = user_content([image("", uri="https://example.org/a.png")], images=True)
    assert web == [{"type": "image_url", "image_url": {"url": "https://example.org/a.png"}}]
    # A model that takes no images (history from before a switch) is told one was there.
    assert user_content(PROMPT, images=False) == "what differs?\n\n" + "\n\n".join(
        ["[image omitted: this model is sent text only]"] * 3)
    assert user_content([{"type": "text", "text": "plain"}], images=True) == "plain"  # no images: a string
    body = request_body("m", [{"role": "user", "content": PROMPT}], [], images=True)
    assert body["messages"][-1]["content"] == parts


# --- end to end --------------------------------------------------------------------------------


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with SSEServer() as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-images")
        yield s


async def prompt_blocks(agent: AgentProcess, sid: str, blocks: list[Any]) -> Any:
    params = {"sessionId": sid, "prompt": blocks}
    validate_def("PromptRequest", params)
    return await agent.request("session/prompt", params)


@pytest.mark.integration
async def test_images_reach_the_model_are_logged_once_and_replayed(
        tmp_path: Path, work: Path, server: SSEServer, snapshot_json: Any) -> None:
    store = tmp_path / "store"
    server.push(text_reply("One is bigger."), text_reply("Still bigger."))
    async with AgentProcess(store, model="openai:gpt-4o") as agent:
        init = await agent.initialize()
        assert init["agentCapabilities"]["promptCapabilities"]["image"] is True
        sid = await agent.new_session(work)
        assert (await prompt_blocks(agent, sid, PROMPT))["stopReason"] == "end_turn"
    first = server.requests[0].json["messages"][-1]
    assert first["role"] == "user" and first["content"] == user_content(PROMPT, images=True)
    assert [p["type"] for p in first["content"]] == ["text", "image_url", "image_url", "image_url"]

    (log_file,) = (store / "sessions").glob(f"{sid}*")
    assert log_file.read_text().count(SHOT) == 1  # the same bytes twice in a prompt: one copy
    (message,) = [e for e in loaded_events(store, sid) if e["type"] == "user/message"]
    assert message["data"]["content"] == compact_images(PROMPT)

    async with AgentProcess(store, model="openai:gpt-4o") as again:
        await again.initialize()
        await again.load_session(sid, work)
        replayed = [u["content"] for u in again.updates_of(sid) if u["sessionUpdate"] == "user_message_chunk"]
        assert replayed == PROMPT  # as the client sent it, both copies whole
        assert (await again.prompt(sid, "and now?"))["stopReason"] == "end_turn"
    history = server.requests[1].json["messages"]
    assert history[1] == first  # the loaded history sends the images again
    replay = [(d, m) for d, m in again.transcript
              if (m.get("params") or {}).get("update", {}).get("sessionUpdate") == "user_message_chunk"]
    pinned = orjson.dumps(normalized([("log", message["data"]), *replay[:4]], tmp_path)).decode()
    assert orjson.loads(pinned.replace(SHOT, "<SHOT bytes>")) == snapshot_json


@pytest.mark.integration
async def test_images_are_refused_for_a_model_that_cannot_take_them(tmp_path: Path, work: Path,
                                                                    server: SSEServer) -> None:
    async with AgentProcess(tmp_path / "only-text") as echo:
        init = await echo.initialize()
        assert init["agentCapabilities"]["promptCapabilities"]["image"] is False
    server.push(text_reply("A small image."))
    store = tmp_path / "store"
    async with AgentProcess(store, model="echo", args=("--model", "openai:gpt-4o")) as agent:
        init = await agent.initialize()
        assert init["agentCapabilities"]["promptCapabilities"]["image"] is True  # one configured model takes them
        sid = await agent.new_session(work)
        with pytest.raises(AgentError) as refused:
            await prompt_blocks(agent, sid, [{"type": "text", "text": "see"}, image(PNG)])
        assert refused.value.code == -32602
        assert refused.value.message == ("this session's model echo does not take images: switch to one that "
                                         "does (openai:gpt-4o) or send text")
        assert (refused.value.data or {})["field"] == "prompt"
        assert (await agent.prompt(sid, "text still works"))["stopReason"] == "end_turn"
        await agent.request("session/set_config_option", {"sessionId": sid, "configId": "model",
                                                          "value": "openai:gpt-4o"})
        assert (await prompt_blocks(agent, sid, [image(PNG)]))["stopReason"] == "end_turn"
    prompts = [e for e in loaded_events(store, sid) if e["type"] == "user/message"]
    assert len(prompts) == 2  # the refused prompt left nothing in the log
    assert server.requests[0].json["messages"][-1]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]
