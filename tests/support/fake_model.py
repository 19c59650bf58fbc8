"""A model that decides by what it is asked, for real third-party agents run against
127.0.0.1 (tests/support/record_agent.py): OpenAI Chat Completions (`/chat/completions`),
the Responses API (`/responses`), the Gemini API (`models/M:streamGenerateContent`,
`:generateContent`, `:countTokens`: gemini-cli with `GOOGLE_GEMINI_BASE_URL`) and
Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`: Claude Code with
`ANTHROPIC_BASE_URL`; a text answer comes after a thinking block, as a model that
thinks answers), streamed as the real endpoints stream them.

What it answers, read from the request:

- the conversation's last item is a tool's output: a text that quotes the output's
  first line ("The command said: ...");
- the last user text holds `RUN: <command>`: one call of the agent's shell tool (the
  first of the request's tools whose name says shell, bash, command or exec), with the
  command in the parameter its schema names (`command`, a string or an argv list);
- anything else: a short text in three pieces, with usage.

Every reply carries usage, so an agent that reports it has something to report.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from tests.support.sse_server import Received, Reply, chunk, stream_reply, text_reply, usage_chunk

SHELL_WORDS = ("shell", "bash", "command", "exec")
RUN = re.compile(r"RUN: (.+)")
HELLO = ("Hello", " from the", " fake model.")


def respond(request: Received) -> Reply:
    """The reply to one request of an agent (Chat Completions or Responses)."""
    try:
        body = request.json
    except orjson.JSONDecodeError:
        body = {}
    path = request.path.partition("?")[0].rstrip("/")
    if path.endswith("/responses"):
        return _responses(body)
    if path.endswith("/messages/count_tokens"):
        return _json_reply({"input_tokens": 120})
    if path.endswith("/messages"):
        return _anthropic(body)
    if ":" in path.rpartition("/")[2]:  # .../models/NAME:method
        return _gemini(path.rpartition(":")[2], body)
    return _chat(body)


# --- what to say ---------------------------------------------------------------------------


def _decide(last_kind: str, last_text: str, tools: list[dict[str, Any]]) -> tuple[str, Any]:
    """("text", pieces) or ("call", (tool name, arguments))."""
    if last_kind == "tool":
        first = next((line for line in last_text.splitlines() if line.strip()), "(nothing)")
        return "text", ("The command", f" said: {first[:80]}",)
    found = RUN.search(last_text)
    tool = _shell_tool(tools)
    if found and tool is not None:
        return "call", (tool[0], _arguments(tool[1], found.group(1).strip()))
    return "text", HELLO


def _shell_tool(tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    for tool in tools:
        spec = tool.get("function", tool)  # chat: {type, function: {...}}; responses: flat
        if not isinstance(spec, dict):
            continue
        name = spec.get("name")
        if isinstance(name, str) and any(word in name.lower() for word in SHELL_WORDS):
            params = spec.get("parameters")
            return name, params if isinstance(params, dict) else {}
    return None


def _arguments(schema: dict[str, Any], command: str) -> dict[str, Any]:
    given = schema.get("properties")
    props: dict[str, Any] = given if isinstance(given, dict) else {}
    arguments: dict[str, Any] = {}
    for name in schema.get("required", []) or ["command"]:
        prop = props.get(name, {})
        if name in ("command", "cmd"):
            arguments[name] = ["bash", "-lc", command] if prop.get("type") == "array" else command
        elif prop.get("type") == "boolean":
            arguments[name] = False
        elif prop.get("type") in ("integer", "number"):
            arguments[name] = 10_000 if "timeout" in name else 1
        else:
            arguments[name] = f"Run {command}"
    if "command" not in arguments and "cmd" not in arguments:
        arguments["command"] = command
    return arguments


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(part.get("text", part.get("output", ""))) if isinstance(part, dict) else str(part)
                         for part in content)
    return ""


# --- Chat Completions -----------------------------------------------------------------------


def _chat(body: dict[str, Any]) -> Reply:
    messages = body.get("messages") or [{}]
    last = messages[-1]
    kind = "tool" if last.get("role") == "tool" else "user"
    text = _text_of(last.get("content"))
    said, what = _decide(kind, text, body.get("tools") or [])
    if said == "text":
        return text_reply(*what, usage=(120, 9))
    name, arguments = what
    call = {"index": 0, "id": "call_fake_1", "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(arguments).decode()}}
    return stream_reply(chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
                        chunk({}, "tool_calls"), usage_chunk(130, 21))


# --- Responses ----------------------------------------------------------------------------------


def _responses(body: dict[str, Any]) -> Reply:
    items = body.get("input") or [{}]
    items = items if isinstance(items, list) else [{"type": "message", "role": "user", "content": items}]
    last = items[-1] if isinstance(items[-1], dict) else {}
    if last.get("type") in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        kind, text = "tool", _text_of(last.get("output"))
    else:
        kind, text = "user", _text_of(last.get("content"))
    said, what = _decide(kind, text, body.get("tools") or [])
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": "resp_fake"}}]
    if said == "text":
        item_id = "msg_fake"
        events.append({"type": "response.output_item.added", "output_index": 0,
                       "item": {"type": "message", "id": item_id, "role": "assistant", "content": []}})
        events += [{"type": "response.output_text.delta", "item_id": item_id, "output_index": 0,
                    "content_index": 0, "delta": piece} for piece in what]
        output = {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                  "content": [{"type": "output_text", "text": "".join(what), "annotations": []}]}
    else:
        name, arguments = what
        output = {"type": "function_call", "id": "fc_fake", "call_id": "call_fake_1", "name": name,
                  "arguments": orjson.dumps(arguments).decode(), "status": "completed"}
    events.append({"type": "response.output_item.done", "output_index": 0, "item": output})
    events.append({"type": "response.completed", "response": {
        "id": "resp_fake", "output": [output],
        "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 9,
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 129}}})
    payloads = [f"event: {e['type']}\ndata: {orjson.dumps(e).decode()}" for e in events]
    return Reply(200, {"Content-Type": "text/event-stream"},
                 [p.encode() + b"\n\n" for p in payloads])


# --- Anthropic Messages -------------------------------------------------------------------

ANTHROPIC_USAGE = {"input_tokens": 100, "cache_creation_input_tokens": 15, "cache_read_input_tokens": 5,
                   "output_tokens": 1}


def _anthropic(body: dict[str, Any]) -> Reply:
    messages = body.get("messages") or [{}]
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    content = last.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        kind, text = "tool", _text_of(results[-1].get("content"))
    else:
        kind, text = "user", "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))
    tools = [{"name": t.get("name"), "parameters": t.get("input_schema")} for t in body.get("tools") or []
             if isinstance(t, dict)]
    said, what = _decide(kind, text, tools)
    if said == "text":
        made: list[tuple[dict[str, Any], list[dict[str, Any]]]] = [
            ({"type": "thinking", "thinking": "", "signature": ""},
             [{"type": "thinking_delta", "thinking": "The user wants a short answer."},
              {"type": "signature_delta", "signature": "fake-signature"}]),
            ({"type": "text", "text": ""}, [{"type": "text_delta", "text": piece} for piece in what])]
        stop, output = "end_turn", 9
    else:
        name, arguments = what
        made = [({"type": "tool_use", "id": "toolu_fake_1", "name": name, "input": {}},
                 [{"type": "input_json_delta", "partial_json": orjson.dumps(arguments).decode()}])]
        stop, output = "tool_use", 21
    model = body.get("model") or "fake-model"
    if not body.get("stream"):  # not streamed: the blocks as one answer
        whole = []
        for start, deltas in made:
            block = dict(start)
            for delta in deltas:
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                elif delta["type"] == "thinking_delta":
                    block["thinking"] += delta["thinking"]
                elif delta["type"] == "input_json_delta":
                    block["input"] = orjson.loads(delta["partial_json"])
            whole.append(block)
        return _json_reply({"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                            "content": whole, "stop_reason": stop, "stop_sequence": None,
                            "usage": {**ANTHROPIC_USAGE, "output_tokens": output}})
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {
        "id": f"msg_fake_{len(messages)}", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": ANTHROPIC_USAGE}}]
    for index, (start, deltas) in enumerate(made):
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                   "usage": {"output_tokens": output}})
    events.append({"type": "message_stop"})
    return Reply(200, {"Content-Type": "text/event-stream"},
                 [f"event: {e['type']}\ndata: {orjson.dumps(e).decode()}\n\n".encode() for e in events])


# --- Gemini -----------------------------------------------------------------------------------

GEMINI_USAGE = {"promptTokenCount": 120, "candidatesTokenCount": 9, "totalTokenCount": 129}


def _gemini(method: str, body: dict[str, Any]) -> Reply:
    if method == "countTokens":
        return _json_reply({"totalTokens": 120})
    contents = body.get("contents") or [{}]
    last = contents[-1] if isinstance(contents[-1], dict) else {}
    parts = last.get("parts") or []
    outputs = [p["functionResponse"] for p in parts if isinstance(p, dict) and "functionResponse" in p]
    if outputs:
        response = outputs[0].get("response")
        output = response.get("output") if isinstance(response, dict) else None
        kind, text = "tool", output if isinstance(output, str) else orjson.dumps(response).decode()
    else:
        kind, text = "user", "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json":
        # A side question of the agent's (which model, who speaks next): an answer that
        # says nothing new, in the shape each of them reads.
        reply = orjson.dumps({"reasoning": "fake", "next_speaker": "user", "model_choice": "flash"}).decode()
        pieces: list[dict[str, Any]] = [{"candidates": [_candidate([{"text": reply}], "STOP")],
                                         "usageMetadata": GEMINI_USAGE}]
    else:
        tools = [{"name": d.get("name"), "parameters": d.get("parametersJsonSchema") or d.get("parameters")}
                 for t in body.get("tools") or [] if isinstance(t, dict)
                 for d in t.get("functionDeclarations") or [] if isinstance(d, dict)]
        said, what = _decide(kind, text, tools)
        if said == "text":
            pieces = [{"candidates": [_candidate([{"text": piece}])]} for piece in what]
            pieces[-1] = {"candidates": [_candidate([{"text": what[-1]}], "STOP")], "usageMetadata": GEMINI_USAGE}
        else:
            name, arguments = what
            pieces = [{"candidates": [_candidate([{"functionCall": {"name": name, "args": arguments}}], "STOP")],
                       "usageMetadata": {**GEMINI_USAGE, "candidatesTokenCount": 21, "totalTokenCount": 141}}]
    if method == "generateContent":  # not streamed: the pieces as one answer
        whole = [part for piece in pieces for part in piece["candidates"][0]["content"]["parts"]]
        return _json_reply({"candidates": [_candidate(whole, "STOP")], "usageMetadata": GEMINI_USAGE})
    return Reply(200, {"Content-Type": "text/event-stream"},
                 [b"data: " + orjson.dumps({**piece, "modelVersion": "fake-model"}) + b"\r\n\r\n"
                  for piece in pieces])


def _candidate(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return candidate


def _json_reply(value: Any) -> Reply:
    return Reply(200, {"Content-Type": "application/json"}, [orjson.dumps(value)], chunked=False)
