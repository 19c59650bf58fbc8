"""Hypothesis strategies for the pieces of session logs (DESIGN.md section 2): JSON
values that stress encoders, ACP content blocks, usage and tool-call content, and the
pieces of event data; tests/support/log_strategies.py builds whole logs from them.

The free-form slots (ACP blocks' `_meta`, tool arguments, display content) carry
arbitrary JSON drawn from a small set of value strategies: no NaN or infinities, ints
within 64 bits (signed or unsigned, as orjson reads them), strings of any unicode except lone surrogates (which are not UTF-8).

Strategies are built once, at import: building them per draw costs more than drawing.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from hypothesis import strategies as st

from session.events import CANCELLED_BY, INTERRUPTED_CODE, REASON_KINDS

Draw = st.DrawFn

# --- JSON values -------------------------------------------------------------------

# Pieces that stress encoders: newlines, quotes, backslashes, NUL and other controls,
# emoji (with ZWJ), astral characters, the JS line separators, a combining mark, a BOM.
SPECIAL_PIECES = (
    "\n",
    "\r\n",
    "\t",
    '"',
    "'",
    "\\",
    "\x00",
    "\x1f",
    "\x7f",
    "😀",
    "👩‍💻",
    "\U0001d54f",  # an astral letter
    "\u2028",
    "\u2029",
    "e\u0301",
    "\ufeff",
    "</script>",
    '{"a": 1}',
)

# Any unicode scalar value: lone surrogates cannot be encoded as UTF-8 (the store
# refuses them as non-JSON data), so they are not valid event data.
characters = st.characters(exclude_categories=["Cs"])


@cache
def texts(max_pieces: int = 5) -> st.SearchStrategy[str]:
    """Arbitrary unicode text, with the awkward pieces mixed in often."""
    piece = st.one_of(st.text(characters, max_size=12), st.sampled_from(SPECIAL_PIECES))
    return st.lists(piece, max_size=max_pieces).map("".join)


json_scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    texts(3),
)


@cache
def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value (nested lists and objects of the scalars above)."""
    return st.recursive(
        json_scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(texts(2), children, max_size=3),
        ),
        max_leaves=max_leaves,
    )


@cache
def json_objects(max_leaves: int = 8) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(texts(2), json_values(max_leaves), max_size=4)


# --- ACP blocks and event data pieces -----------------------------------------------

TEXT = texts()
SHORT = texts(2)
BOOL = st.booleans()
uris = st.one_of(
    st.sampled_from(["file:///w/a.py", "file:///w/dir/b%20c.txt", "https://example.com/x?y=1"]),
    SHORT.map(lambda t: "file:///w/" + t),
)
_mime_types = st.sampled_from(["text/plain", "text/x-python", "application/json", "image/png"])
names = st.one_of(st.sampled_from(["read_file", "write_file", "run", "search"]), SHORT)
_hex = st.binary(max_size=12).map(bytes.hex)
_tokens = st.integers(0, 2**31)
_sizes = st.integers(0, 2**40)
_content_kinds = st.sampled_from(["text", "text", "text", "resource_link", "resource", "image"])
_display_kinds = st.sampled_from(["content", "diff", "terminal"])
chunk_kinds = st.sampled_from(["text", "reasoning"])
block_kinds = st.sampled_from(["text", "reasoning", "tool-call"])
call_id_bases = st.one_of(st.sampled_from(["c1", "c2", "call_0", "toolu_01", "1"]), SHORT)
# Mostly a message; sometimes only usage (a step cut off with usage but no content);
# rarely nothing (a step cut off before the model produced anything).
message_shapes = st.sampled_from(["message"] * 6 + ["usage-only", "none"])
modes = st.sampled_from(["ask", "code", "architect"])
models = st.sampled_from(["claude-sonnet", "gpt-x", "local/qwen"])
reason_kinds = st.sampled_from(REASON_KINDS)
cancelled_by = st.sampled_from(CANCELLED_BY)
error_codes = st.sampled_from(["rate_limit", "overloaded", "500"])
tool_kinds = st.sampled_from(
    [
        "read",
        "edit",
        "delete",
        "move",
        "search",
        "execute",
        "think",
        "fetch",
        "switch_mode",
        "other",
    ]
)
tool_error_names = st.sampled_from(["ToolError", "PermissionError", "OSError"])
# Error codes of ordinary failed results: never INTERRUPTED_CODE, which marks the
# closers' synthetic results.
tool_error_codes = st.one_of(
    st.sampled_from(["tool_error", "permission_denied", "not_found", "timeout", "cancelled"]),
    SHORT.filter(lambda c: c != INTERRUPTED_CODE),
)
permissions = st.one_of(
    st.sampled_from(["allow", "allow_always", "reject"]).map(
        lambda o: {"outcome": "selected", "optionId": o}
    ),
    st.just({"outcome": "cancelled"}),
    st.just({"outcome": "error", "code": -32603, "message": "the client failed"}),
    st.just({"outcome": "invalid", "message": "the client's answer {} is not one of the options offered"}),
)
lines = st.none() | st.integers(0, 10_000)
time_steps = st.sampled_from([0, 0, 1, 7, 250, 60_000])


def with_optional(
    draw: Draw, base: dict[str, Any], **optional: st.SearchStrategy[Any]
) -> dict[str, Any]:
    """`base` plus each optional field, drawn or left out."""
    out = dict(base)
    for key, strategy in optional.items():
        if draw(BOOL):
            out[key] = draw(strategy)
    return out


def draw_content_block(draw: Draw, json_leaves: int = 6) -> dict[str, Any]:
    """An ACP ContentBlock: text (mostly), resource_link, embedded resource or image."""
    kind = draw(_content_kinds)
    meta = json_objects(json_leaves)
    if kind == "text":
        return with_optional(draw, {"type": "text", "text": draw(TEXT)}, _meta=meta)
    if kind == "resource_link":
        base = {"type": "resource_link", "uri": draw(uris), "name": draw(SHORT)}
        return with_optional(
            draw,
            base,
            mimeType=_mime_types,
            title=SHORT,
            description=TEXT,
            size=_sizes,
            _meta=meta,
        )
    if kind == "resource":
        if draw(BOOL):
            contents: dict[str, Any] = {"uri": draw(uris), "text": draw(TEXT)}
        else:
            contents = {"uri": draw(uris), "blob": draw(_hex)}
        contents = with_optional(draw, contents, mimeType=_mime_types)
        return with_optional(draw, {"type": "resource", "resource": contents}, _meta=meta)
    return {"type": "image", "data": draw(_hex), "mimeType": "image/png"}


@st.composite
def acp_content_blocks(draw: Draw, json_leaves: int = 6) -> dict[str, Any]:
    return draw_content_block(draw, json_leaves)


def draw_usage(draw: Draw) -> dict[str, Any]:
    base = {"inputTokens": draw(_tokens), "outputTokens": draw(_tokens)}
    return with_optional(
        draw, base, cacheReadTokens=_tokens, cacheWriteTokens=_tokens, reasoningTokens=_tokens
    )


def draw_tool_call_content(draw: Draw, json_leaves: int) -> dict[str, Any]:
    """An ACP ToolCallContent (the `display` of a result)."""
    kind = draw(_display_kinds)
    if kind == "content":
        return {"type": "content", "content": draw_content_block(draw, json_leaves)}
    if kind == "diff":
        base = {"type": "diff", "path": draw(uris), "newText": draw(TEXT)}
        return with_optional(draw, base, oldText=TEXT)
    return {"type": "terminal", "terminalId": draw(SHORT)}


# The sessionUpdate kinds `acp-bridge wrap` records as `wrapped/update`: the ACP ones no
# other event holds, and one no ACP version defines (an extension's, or a newer one's).
_wrapped_kinds = st.sampled_from([
    "plan", "current_mode_update", "config_option_update", "available_commands_update",
    "session_info_update", "tool_call_update", "agent_message_chunk", "_vendor/progress",
])  # fmt: skip


def draw_wrapped_update(draw: Draw, json_leaves: int) -> dict[str, Any]:
    """An ACP SessionUpdate as a wrapped agent may send one that no event records."""
    kind = draw(_wrapped_kinds)
    update: dict[str, Any] = {"sessionUpdate": kind}
    if kind == "plan":
        update["entries"] = [{"content": draw(TEXT), "priority": "medium", "status": "pending"}
                             for _ in draw_list(draw, 2)]
    elif kind == "current_mode_update":
        update["currentModeId"] = draw(SHORT)
    elif kind == "available_commands_update":
        update["availableCommands"] = [{"name": draw(SHORT), "description": draw(TEXT)}
                                       for _ in draw_list(draw, 2)]
    elif kind == "session_info_update":
        update["title"] = draw(TEXT)
    elif kind == "tool_call_update":  # an interim one: content, no final status
        update.update(toolCallId=draw(call_id_bases), status="in_progress",
                      content=[draw_tool_call_content(draw, json_leaves) for _ in draw_list(draw, 2)])
    elif kind == "agent_message_chunk":  # not text: no assistant/chunk can hold it
        update["content"] = {"type": "image", "data": draw(_hex), "mimeType": "image/png"}
    else:
        update["value"] = draw(json_values(json_leaves))
    return with_optional(draw, update, _meta=json_objects(json_leaves))


def draw_list(draw: Draw, max_size: int) -> range:
    return range(draw(st.integers(0, max_size)))


def interrupted_result_text(name: str, started: bool) -> str:
    if started:
        return f"The {name} call was interrupted while running; its outcome is unknown."
    return f"The {name} call was interrupted before it started."
