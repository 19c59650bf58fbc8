"""`openai:MODEL` against a real HTTP server on 127.0.0.1 (tests/support/sse_server.py) serving
streams in the wire format of OpenAI-compatible endpoints: the provider on its own,
the pure transcript conversion, and the real stdio agent end to end."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.content import blocks_text
from acp_bridge.errors import ModelSpecError
from acp_bridge.models import (
    Finish,
    ModelChunk,
    ModelRequest,
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
    load_model,
)
from acp_bridge.models.echo import prompt_text
from acp_bridge.models.openai import OpenAIModel
from acp_bridge.models.openai_errors import retry_after
from acp_bridge.models.openai_request import openai_messages
from acp_bridge.models.openai_stream import SSEDecoder
from acp_bridge.tools import tool_specs
from session.transcript import Message
from tests.support.acp_client import AgentError, AgentProcess
from tests.support.sse_server import (
    Reply,
    SSEServer,
    chunk,
    error_reply,
    sse_events,
    stream_reply,
    text_reply,
    usage_chunk,
)

pytestmark = pytest.mark.anyio

PROMPT: list[Message] = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[SSEServer]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # a proxy from the environment must not see these
    with SSEServer() as s:
        yield s


@pytest.fixture
async def model(server: SSEServer) -> AsyncIterator[OpenAIModel]:
    m = OpenAIModel("test-model", base_url=server.url, api_key="sk-test", timeout=5,
                    backoff_base=0.05, context_window=1000)
    yield m
    await m.aclose()


async def run(model: OpenAIModel, messages: Sequence[Message] = PROMPT,
              tools: Sequence[Any] = ()) -> list[ModelChunk]:
    return [c async for c in model.stream(ModelRequest(messages, tools))]


def texts(chunks: list[ModelChunk]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


# --- streaming ----------------------------------------------------------------------------


@pytest.mark.integration
async def test_text_stream_and_the_request(server: SSEServer, model: OpenAIModel) -> None:
    server.push(text_reply("Hel", "lo", " world"))
    out = await run(model, tools=tool_specs())
    assert out == [TextDelta("Hel"), TextDelta("lo"), TextDelta(" world"),
                   UsageChunk({"inputTokens": 7, "outputTokens": 3}), Finish("stop")]
    (req,) = server.requests
    assert (req.method, req.path) == ("POST", "/v1/chat/completions")
    assert req.headers["authorization"] == "Bearer sk-test"
    body = req.json
    assert body["model"] == "test-model" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][1:] == [{"role": "user", "content": "hi"}]
    assert [t["function"]["name"] for t in body["tools"]] == [t["name"] for t in tool_specs()]
    read = body["tools"][0]
    assert read["type"] == "function" and set(read["function"]) == {"name", "description", "parameters"}
    assert read["function"]["parameters"]["type"] == "object"
    assert "working directory is" not in body["messages"][0]["content"]  # no session: none named


@pytest.mark.integration
async def test_the_system_message_names_the_sessions_working_directory(server: SSEServer,
                                                                      model: OpenAIModel) -> None:
    server.push(text_reply("ok"))
    [c async for c in model.stream(ModelRequest(PROMPT, [], cwd="/home/dev/my project"))]
    (req,) = server.requests
    system = req.json["messages"][0]
    assert system["role"] == "system"
    assert system["content"].endswith("The session's working directory is /home/dev/my project.")


@pytest.mark.integration
async def test_recorded_bytes_split_anywhere(server: SSEServer, model: OpenAIModel) -> None:
    # The exact bytes of a recorded stream, with a keep-alive comment and CRLF line ends,
    # cut into pieces that split lines, the "data:" prefix and a UTF-8 character.
    wire = (
        b'data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1722000000,"model":"gpt-4o-2024-08-06",'
        b'"system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},'
        b'"logprobs":null,"finish_reason":null}],"usage":null}\r\n\r\n'
        b": keep-alive\r\n\r\n"
        b'data:{"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1722000000,"model":"gpt-4o-2024-08-06",'
        b'"choices":[{"index":0,"delta":{"content":"caf\xc3\xa9 "},"logprobs":null,"finish_reason":null}],"usage":null}\r\n\r\n'
        b'data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1722000000,"model":"gpt-4o-2024-08-06",'
        b'"choices":[{"index":0,"delta":{"content":"ok"},"logprobs":null,"finish_reason":null}],"usage":null}\r\n\r\n'
        b'data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1722000000,"model":"gpt-4o-2024-08-06",'
        b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}\r\n\r\n'
        b'data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1722000000,"model":"gpt-4o-2024-08-06",'
        b'"choices":[],"usage":{"prompt_tokens":19,"completion_tokens":2,"total_tokens":21,'
        b'"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},'
        b'"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0}}}\r\n\r\n'
        b"data: [DONE]\r\n\r\n"
    )
    cuts = [3, 250, 251, 400, wire.index(b"\xc3") + 1, wire.index(b"data:{") + 2, len(wire) - 5]
    pieces = [wire[a:b] for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(wire)], strict=True)]
    server.push(Reply(200, {"Content-Type": "text/event-stream"}, pieces, delay=0.005))
    out = await run(model)
    assert texts(out) == "café ok"
    assert out[-2:] == [UsageChunk({"inputTokens": 19, "outputTokens": 2, "cacheReadTokens": 0,
                                    "reasoningTokens": 0}), Finish("stop")]


def test_sse_decoder_pieces() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\n\nevent: x\ndata: c\ndata: d\r\rdata: e") == ["a\nb", "c\nd"]
    assert decoder.close() == ["e"]


@pytest.mark.integration
async def test_reasoning_content(server: SSEServer, model: OpenAIModel) -> None:
    server.push(stream_reply(
        chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
        chunk({"content": None, "reasoning_content": "Let me "}),
        chunk({"content": None, "reasoning_content": "think."}),
        chunk({"content": "Four.", "reasoning_content": None}),
        chunk({"content": ""}, "stop"),
        usage_chunk(12, 30, cached=8, reasoning=25),
    ))
    out = await run(model)
    assert out == [ReasoningDelta("Let me "), ReasoningDelta("think."), TextDelta("Four."),
                   UsageChunk({"inputTokens": 12, "outputTokens": 30, "cacheReadTokens": 8,
                               "reasoningTokens": 25}),
                   Finish("stop")]


@pytest.mark.integration
async def test_parallel_tool_calls_split_across_deltas(server: SSEServer, model: OpenAIModel) -> None:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return chunk({"tool_calls": [{"index": index, **fields}]})

    server.push(stream_reply(
        chunk({"role": "assistant", "content": None}),
        call(0, id="call_A", type="function", function={"name": "read_file", "arguments": ""}),
        call(1, id="call_B", type="function", function={"name": "list_dir", "arguments": ""}),
        call(0, function={"arguments": '{"pa'}),
        call(1, function={"arguments": '{"path"'}),
        call(0, function={"arguments": 'th": "a.txt"}'}),
        call(1, function={"arguments": ': "."}'}),
        chunk({}, "tool_calls"),
        usage_chunk(50, 40),
    ))
    out = await run(model, tools=tool_specs())
    assert out == [ToolCallChunk("call_A", "read_file", '{"path": "a.txt"}'),
                   ToolCallChunk("call_B", "list_dir", '{"path": "."}'),
                   UsageChunk({"inputTokens": 50, "outputTokens": 40}),
                   Finish("tool_calls")]


@pytest.mark.parametrize(("wire", "ours"), [("length", "max_tokens"), ("content_filter", "refusal"),
                                            ("stop", "stop"), ("tool_calls", "tool_calls")])
@pytest.mark.integration
async def test_finish_reasons(server: SSEServer, model: OpenAIModel, wire: str, ours: str) -> None:
    server.push(text_reply("x", finish=wire, usage=None))
    assert (await run(model))[-1] == Finish(ours)  # type: ignore[arg-type]


@pytest.mark.integration
async def test_a_server_that_ignores_stream_true(server: SSEServer, model: OpenAIModel) -> None:
    body = orjson.dumps({"id": "c", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": "Reading.", "tool_calls": [
                             {"id": "c1", "type": "function",
                              "function": {"name": "read_file", "arguments": "{\"path\":\"x\"}"}}]}}],
                         "usage": {"prompt_tokens": 5, "completion_tokens": 6}})
    server.push(Reply(200, {"Content-Type": "application/json"}, [body], chunked=False))
    assert await run(model) == [TextDelta("Reading."), ToolCallChunk("c1", "read_file", '{"path":"x"}'),
                                UsageChunk({"inputTokens": 5, "outputTokens": 6}), Finish("tool_calls")]


@pytest.mark.integration
async def test_an_error_inside_the_stream(server: SSEServer, model: OpenAIModel) -> None:
    server.push(stream_reply(chunk({"content": "Hal"}), {"error": {"message": "upstream overloaded",
                                                                   "type": "server_error"}}, done=False))
    out = await run(model)
    assert out[0] == TextDelta("Hal")
    assert out[-1].code == "server" and "upstream overloaded" in (out[-1].message or "")  # type: ignore[union-attr]
    assert len(server.requests) == 1


# --- errors and retries ----------------------------------------------------------------


@pytest.mark.parametrize(("status", "code"), [(401, "auth"), (403, "auth"), (400, "bad_request"),
                                              (404, "bad_request")])
@pytest.mark.integration
async def test_errors_that_are_not_retried(server: SSEServer, model: OpenAIModel, status: int, code: str) -> None:
    server.push(error_reply(status, f"server says {status}"))
    (finish,) = await run(model)
    assert isinstance(finish, Finish)
    assert (finish.reason, finish.code, finish.retryable) == ("error", code, False)
    assert f"server says {status}" in (finish.message or "") and str(status) in (finish.message or "")
    assert len(server.requests) == 1


@pytest.mark.integration
async def test_401_says_what_to_check(server: SSEServer) -> None:
    keyless = OpenAIModel("m", base_url=server.url, api_key=None)
    server.push(error_reply(401, "You didn't provide an API key."))
    try:
        (finish,) = await run(keyless)
    finally:
        await keyless.aclose()
    assert "OPENAI_API_KEY is not set" in (finish.message or "")  # type: ignore[union-attr]
    assert "authorization" not in server.requests[0].headers


@pytest.mark.integration
async def test_429_honours_retry_after_then_succeeds(server: SSEServer, model: OpenAIModel) -> None:
    server.push(error_reply(429, "Rate limit reached for requests", type_="requests",
                            code="rate_limit_exceeded", headers={"Retry-After": "1"}),
                text_reply("fine"))
    started = time.monotonic()
    out = await run(model)
    assert time.monotonic() - started >= 0.9  # the server asked for a second, not our 0.05
    assert texts(out) == "fine" and out[-1] == Finish("stop")
    assert len(server.requests) == 2
    # Each retry is announced before its wait (the runner tells a client that takes notices).
    assert [c for c in out if isinstance(c, Retrying)] == [
        Retrying(2, 3, 1.0, "rate_limit", "rate limited (429 Too Many Requests): Rate limit reached for requests")]
    server.push(*[error_reply(429, "Rate limit reached", headers={"retry-after-ms": "20"})] * 3)
    *retries, finish = await run(model)
    assert [(r.attempt, r.attempts, r.delay) for r in retries] == [(2, 3, 0.02), (3, 3, 0.02)]  # type: ignore[union-attr]
    assert finish == Finish("error", "rate limited (429 Too Many Requests): Rate limit reached "
                            "(gave up after 3 tries; the server asks to wait 0.02 s)", "rate_limit", True)


@pytest.mark.integration
async def test_429_asking_for_too_long_is_not_waited_for(server: SSEServer, model: OpenAIModel) -> None:
    server.push(error_reply(429, "slow down", headers={"Retry-After": "600"}))
    (finish,) = await run(model)
    assert (finish.code, finish.retryable) == ("rate_limit", True)  # type: ignore[union-attr]
    assert "retry after 600 s" in (finish.message or "")  # type: ignore[union-attr]
    assert len(server.requests) == 1


@pytest.mark.integration
async def test_out_of_quota_is_not_retried(server: SSEServer, model: OpenAIModel) -> None:
    server.push(error_reply(429, "You exceeded your current quota", code="insufficient_quota"))
    (finish,) = await run(model)
    assert (finish.code, finish.retryable) == ("rate_limit", False)  # type: ignore[union-attr]
    assert len(server.requests) == 1


@pytest.mark.integration
async def test_500_then_success(server: SSEServer, model: OpenAIModel) -> None:
    server.push(error_reply(500, "The server had an error", type_="server_error"), text_reply("ok"))
    out = await run(model)
    assert texts(out) == "ok" and len(server.requests) == 2


@pytest.mark.integration
async def test_5xx_until_the_tries_run_out(server: SSEServer, model: OpenAIModel) -> None:
    server.push(*[error_reply(503, "overloaded", type_="server_error")] * 3)
    *retries, finish = await run(model)
    assert [type(r) for r in retries] == [Retrying, Retrying]
    assert finish == Finish("error", "the API failed (503 Service Unavailable): overloaded (gave up after 3 tries)",
                            "server", True)
    assert len(server.requests) == 3


@pytest.mark.integration
async def test_stream_cut_after_output_is_a_network_error(server: SSEServer, model: OpenAIModel) -> None:
    reply = text_reply("one", "two", "three")
    reply.cut_after = 3  # role, "one", "two" and then the connection is gone
    server.push(reply)
    out = await run(model)
    assert out[:2] == [TextDelta("one"), TextDelta("two")]
    finish = out[-1]
    assert isinstance(finish, Finish) and (finish.reason, finish.code, finish.retryable) == ("error", "network", True)
    assert "cut off" in (finish.message or "") and "not retried" in (finish.message or "")
    assert len(server.requests) == 1  # never retried once output began


@pytest.mark.integration
async def test_stream_cut_before_output_is_retried(server: SSEServer, model: OpenAIModel) -> None:
    server.push(Reply(200, {"Content-Type": "text/event-stream"}, sse_events(chunk({"role": "assistant"})),
                      cut_after=1), text_reply("again"))
    assert texts(await run(model)) == "again"
    assert len(server.requests) == 2


@pytest.mark.integration
async def test_body_ending_without_finish_is_a_network_error(server: SSEServer, model: OpenAIModel) -> None:
    server.push(stream_reply(chunk({"content": "half"}), done=False))
    out = await run(model)
    assert out[-1].code == "network" and out[-1].retryable is True  # type: ignore[union-attr]


@pytest.mark.integration
async def test_connection_refused(server: SSEServer) -> None:
    with SSEServer() as gone:
        url = gone.url
    refused = OpenAIModel("m", base_url=url, attempts=2, backoff_base=0.01)
    try:
        *retries, finish = await run(refused)
    finally:
        await refused.aclose()
    assert [(r.attempt, r.code) for r in retries] == [(2, "network")]  # type: ignore[union-attr]
    assert (finish.code, finish.retryable) == ("network", True)  # type: ignore[union-attr]
    assert "cannot connect" in (finish.message or "") and "gave up after 2 tries" in (finish.message or "")  # type: ignore[union-attr]


@pytest.mark.integration
async def test_read_timeout(server: SSEServer) -> None:
    slow = OpenAIModel("m", base_url=server.url, timeout=0.3)
    reply = text_reply("early")
    reply.chunks = reply.chunks[:2]
    reply.hang = True
    server.push(reply)
    try:
        out = await run(slow)
    finally:
        await slow.aclose()
    assert out[0] == TextDelta("early")
    assert out[-1].code == "network" and "ACP_BRIDGE_OPENAI_TIMEOUT" in (out[-1].message or "")  # type: ignore[union-attr]


# --- cancellation ------------------------------------------------------------------------


def hanging_reply() -> Reply:
    return stream_reply(chunk({"role": "assistant", "content": ""}), chunk({"content": "streaming"}),
                        done=False, hang=True)


@pytest.mark.integration
async def test_cancel_while_streaming_closes_the_connection(server: SSEServer, model: OpenAIModel) -> None:
    server.push(hanging_reply())
    seen: list[ModelChunk] = []
    with anyio.CancelScope() as scope:
        async for c in model.stream(ModelRequest(PROMPT, [])):
            seen.append(c)
            scope.cancel()  # cancelled while the stream waits for more
    assert seen == [TextDelta("streaming")]
    assert await anyio.to_thread.run_sync(server.wait_disconnects)


@pytest.mark.integration
async def test_closing_the_stream_closes_the_connection(server: SSEServer, model: OpenAIModel) -> None:
    server.push(hanging_reply())
    stream = model.stream(ModelRequest(PROMPT, []))
    assert await anext(stream) == TextDelta("streaming")
    await stream.aclose()  # type: ignore[attr-defined]
    assert await anyio.to_thread.run_sync(server.wait_disconnects)


# --- the transcript ------------------------------------------------------------------------


def test_transcript_conversion() -> None:
    messages: list[Message] = [
        {"role": "user", "content": [
            {"type": "text", "text": "Look at this:"},
            {"type": "resource", "resource": {"uri": "file:///p/a.py", "text": "x = 1\n", "mimeType": "text/x-python"}},
            {"type": "resource_link", "uri": "file:///p/b.md", "name": "b.md"},
        ]},
        {"role": "assistant", "content": [
            {"type": "reasoning", "text": "private"},
            {"type": "text", "text": "Reading both."},
            {"type": "tool-call", "id": "c1", "name": "read_file", "arguments": '{"path": "b.md"}'},
            {"type": "tool-call", "id": "c2", "name": "read_file", "arguments": '{"path": '},
        ]},
        {"role": "tool", "callId": "c1", "name": "read_file", "content": [{"type": "text", "text": "# B"}],
         "isError": False},
        {"role": "tool", "callId": "c2", "name": "read_file",
         "content": [{"type": "text", "text": "tool arguments are not valid JSON"}], "isError": True},
        {"role": "assistant", "content": [{"type": "reasoning", "text": "only thoughts"}]},
        {"role": "assistant", "content": [{"type": "tool-call", "id": "c3", "name": "list_dir", "arguments": "{}"}]},
        {"role": "user", "content": [{"type": "text", "text": "next"}]},
    ]
    assert openai_messages(messages, system="sys") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Look at this:\n\n```file:///p/a.py\nx = 1\n```\n\n[b.md](file:///p/b.md)"},
        {"role": "assistant", "content": "Reading both.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "b.md"}'}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "# B"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: tool arguments are not valid JSON"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c3", "content": "Error: no result was recorded for this tool call."},
        {"role": "user", "content": "next"},
    ]


def test_a_fence_inside_a_resource_gets_a_longer_fence() -> None:
    (msg,) = openai_messages([{"role": "user", "content": [
        {"type": "resource", "resource": {"uri": "file:///r.md", "text": "```py\nx\n```"}}]}])
    assert msg["content"] == "````file:///r.md\n```py\nx\n```\n````"


BLOCKS: list[Any] = [
    {"type": "text", "text": "see"},
    {"type": "resource", "resource": {"uri": "file:///a.py", "text": "x = 1"}},
    {"type": "resource", "resource": {"uri": "file:///b.png", "blob": "AA==", "mimeType": "image/png"}},
    {"type": "resource_link", "uri": "file:///c.md", "name": "c.md"},
    {"type": "image", "data": "AA==", "mimeType": "image/png"},
    {"type": "content", "content": {"type": "text", "text": "wrapped"}},
    {"type": "diff", "path": "/p/d.txt", "newText": "y"},
    {"type": "text", "text": ""},
    "not a block",
]


def test_blocks_text_as_a_model_and_as_echo_read_them() -> None:
    assert blocks_text(BLOCKS) == (
        "see\n\n```file:///a.py\nx = 1\n```\n\n[binary resource file:///b.png (image/png)]\n\n"
        "[c.md](file:///c.md)\n\n[image omitted: this model is sent text only]\n\nwrapped\n\n"
        "[diff of /p/d.txt]")
    assert prompt_text(BLOCKS) == "see\nx = 1\nwrapped"  # echo: typed and embedded text only
    assert blocks_text("see") == prompt_text({"type": "text"}) == ""  # not a list of blocks


def test_retry_after_forms() -> None:
    assert retry_after({"Retry-After": "2"}) == 2
    assert retry_after({"retry-after-ms": "150", "Retry-After": "9"}) == 0.15
    assert retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480) == 10
    assert retry_after({"Retry-After": "soon"}) is None and retry_after({}) is None


# --- configuration -------------------------------------------------------------------------


def test_load_model_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ACP_BRIDGE_CONTEXT_WINDOW", "ACP_BRIDGE_OPENAI_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    model = load_model("openai:gpt-4o-2024-08-06")
    assert isinstance(model, OpenAIModel)
    assert (model.name, model.url, model.context_window) == (
        "openai:gpt-4o-2024-08-06", "https://api.openai.com/v1/chat/completions", 128_000)
    assert load_model("openai:gpt-4.1-mini").context_window == 1_047_576
    assert load_model("openai:o4-mini").context_window == 200_000
    assert load_model("openai:llama3.2").context_window is None  # unknown: the agent's default
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1/")
    monkeypatch.setenv("ACP_BRIDGE_CONTEXT_WINDOW", "32768")
    monkeypatch.setenv("ACP_BRIDGE_OPENAI_TIMEOUT", "600")
    model = load_model("openai:llama3.2")
    assert isinstance(model, OpenAIModel)
    assert (model.url, model.context_window, model.timeout) == ("http://localhost:11434/v1/chat/completions",
                                                                32768, 600)
    monkeypatch.setenv("ACP_BRIDGE_CONTEXT_WINDOW", "lots")
    with pytest.raises(ModelSpecError, match="ACP_BRIDGE_CONTEXT_WINDOW"):
        load_model("openai:gpt-4o")
    with pytest.raises(ModelSpecError, match="model name"):
        load_model("openai:")
    monkeypatch.delenv("ACP_BRIDGE_CONTEXT_WINDOW")
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:11434/v1")
    with pytest.raises(ModelSpecError, match="http://"):
        load_model("openai:llama3.2")


@pytest.mark.integration
def test_httpx_is_not_on_the_start_up_path() -> None:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "acp_bridge", "--version"],
                         capture_output=True, text=True, check=True)
    assert "acp-bridge" in out.stdout
    assert "httpx" not in out.stderr
    check = "import sys, acp_bridge.agent.serve, acp_bridge.models; sys.exit('httpx' in sys.modules)"
    subprocess.run([sys.executable, "-c", check], check=True)


# --- end to end: the real stdio agent ---------------------------------------------------------


@pytest.fixture
def agent_env(server: SSEServer, monkeypatch: pytest.MonkeyPatch) -> SSEServer:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-e2e")
    monkeypatch.setenv("ACP_BRIDGE_CONTEXT_WINDOW", "32768")
    monkeypatch.delenv("ACP_BRIDGE_OPENAI_ATTEMPTS", raising=False)
    return server


@pytest.mark.integration
async def test_e2e_text_turn(tmp_path: Path, work: Path, agent_env: SSEServer) -> None:
    agent_env.push(text_reply("Hello", " from", " the API", usage=(20, 3)))
    async with AgentProcess(tmp_path / "store", model="openai:test-model") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        answer = await agent.prompt(sid, "say hello")
        assert answer["stopReason"] == "end_turn"
    updates = agent.updates_of(sid)
    assert [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"] == [
        "Hello", " from", " the API"]
    (usage,) = [u for u in updates if u["sessionUpdate"] == "usage_update"]
    assert (usage["used"], usage["size"]) == (23, 32768)
    (req,) = agent_env.requests
    assert req.headers["authorization"] == "Bearer sk-e2e"
    assert req.json["messages"][-1] == {"role": "user", "content": "say hello"}
    assert req.json["model"] == "test-model"


@pytest.mark.integration
async def test_e2e_tool_call_turn(tmp_path: Path, work: Path, agent_env: SSEServer) -> None:
    agent_env.push(
        stream_reply(chunk({"role": "assistant", "content": "Reading."}),
                     chunk({"tool_calls": [{"index": 0, "id": "call_r1", "type": "function",
                                            "function": {"name": "read_file", "arguments": ""}}]}),
                     chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "no'}}]}),
                     chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'tes.txt"}'}}]}),
                     chunk({}, "tool_calls"), usage_chunk(100, 20)),
        text_reply("It says one, two."),
    )
    async with AgentProcess(tmp_path / "store", model="openai:test-model") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "what is in notes.txt?"))["stopReason"] == "end_turn"
    statuses = [(u["toolCallId"], u.get("status")) for u in agent.updates_of(sid)
                if u["sessionUpdate"] in ("tool_call", "tool_call_update") and u.get("status")]
    assert statuses[0] == ("call_r1", "pending") and statuses[-1] == ("call_r1", "completed")
    first, second = agent_env.requests
    messages = second.json["messages"]
    assert messages[len(first.json["messages"]):] == [
        {"role": "assistant", "content": "Reading.", "tool_calls": [
            {"id": "call_r1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}]},
        messages[-1],
    ]
    assert messages[-1]["role"] == "tool" and messages[-1]["tool_call_id"] == "call_r1"
    assert "one\ntwo" in messages[-1]["content"]


@pytest.mark.integration
async def test_e2e_errors(tmp_path: Path, work: Path, agent_env: SSEServer) -> None:
    agent_env.push(error_reply(401, "Incorrect API key provided: sk-e2e.", code="invalid_api_key"),
                   *[error_reply(500, "The server had an error while processing your request.",
                                 type_="server_error")] * 3)
    async with AgentProcess(tmp_path / "store", model="openai:test-model") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        with pytest.raises(AgentError) as auth:
            await agent.prompt(sid, "hello")
        assert auth.value.code == -32000
        assert auth.value.data == {"turn": 1, "step": 1, "code": "auth", "retryable": False}
        assert "Incorrect API key" in str(auth.value.message)
        with pytest.raises(AgentError) as server_error:
            await agent.prompt(sid, "again")
        assert server_error.value.code == -32603
        assert server_error.value.data == {"turn": 2, "step": 1, "code": "server", "retryable": True}
        assert "gave up after 3 tries" in str(server_error.value.message)
    assert len(agent_env.requests) == 4


@pytest.mark.integration
async def test_e2e_cancel_closes_the_connection(tmp_path: Path, work: Path, agent_env: SSEServer) -> None:
    agent_env.push(hanging_reply(), text_reply("later"))
    async with AgentProcess(tmp_path / "store", model="openai:test-model") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        answers: list[Any] = []
        async with anyio.create_task_group() as tg:
            async def prompt() -> None:
                answers.append(await agent.prompt(sid, "stream"))

            tg.start_soon(prompt)
            await agent.wait_for(lambda: any(u["sessionUpdate"] == "agent_message_chunk"
                                             for u in agent.updates_of(sid)))
            await agent.notify("session/cancel", {"sessionId": sid})
        assert answers[0]["stopReason"] == "cancelled"
        assert await anyio.to_thread.run_sync(agent_env.wait_disconnects)
        assert (await agent.prompt(sid, "go on"))["stopReason"] == "end_turn"
    assert len(agent_env.requests) == 2
