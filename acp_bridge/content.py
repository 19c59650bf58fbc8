"""ACP content blocks as plain text: the one renderer, pure, importing nothing of ours.

Prompts, tool results and `ToolCallContent` carry lists of content blocks; the models
(echo, the OpenAI wire format) and the terminal programs each need them as text. They
differ in one decision only, what to do with what is not typed text, so that decision
is the parameters and everything else (which blocks have text, how a `content`
wrapper is unwrapped, what is skipped) is shared:

- `fence_resources`: an embedded text resource as a Markdown fence headed by its URI
  (what a model needs to tell the file from the question), or as its bare text (what
  echo repeats).
- `notes`: the blocks without text (links, images, audio, binary resources, diffs) as
  a short bracketed note, so a reader knows they were there; or left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def blocks_text(blocks: object, *, fence_resources: bool = True, notes: bool = True,
                separator: str = "\n\n") -> str:
    """The text of `blocks` (a list of ACP content blocks; anything else has none),
    one part per block that yields text, joined with `separator`. Items that are not
    objects and blocks of unknown types are skipped."""
    if isinstance(blocks, str | bytes) or not isinstance(blocks, Sequence):
        return ""
    parts = (block_text(b, fence_resources=fence_resources, notes=notes) for b in blocks)
    return separator.join(p for p in parts if p)


def block_text(block: object, *, fence_resources: bool = True, notes: bool = True) -> str:
    """One block as text ("" when it yields none); see `blocks_text`."""
    if not isinstance(block, Mapping):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource" and isinstance(block.get("resource"), Mapping):
        resource: Mapping[str, Any] = block["resource"]
        text = resource.get("text")
        if isinstance(text, str):
            return fenced(str(resource.get("uri", "")), text) if fence_resources else text
        if notes:
            return f"[binary resource {resource.get('uri', '')} ({resource.get('mimeType', 'unknown type')})]"
        return ""
    if kind == "content" and isinstance(block.get("content"), Mapping):  # ToolCallContent
        return block_text(block["content"], fence_resources=fence_resources, notes=notes)
    if not notes:
        return ""
    if kind == "resource_link":
        name = block.get("title") or block.get("name") or block.get("uri", "")
        return f"[{name}]({block.get('uri', '')})"
    if kind in ("image", "audio"):
        return f"[{kind} omitted: this model is sent text only]"
    if kind == "diff":
        return f"[diff of {block.get('path', '')}]"
    return ""


def fenced(info: str, text: str) -> str:
    """`text` in a Markdown code fence with `info` after the opening fence; the fence
    is longer than any run of backticks the text holds, so the text cannot close it."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{info}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{fence}"


# An image the prompt already holds, kept once: a later block with the same bytes is
# stored as a reference to the first (its `data` emptied, the index of the first in
# `_meta.acpBridge.sameAs`), so a pasted screenshot sent twice costs the log one copy.
SAME_AS = "sameAs"


def _is_image(block: object) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "image" and isinstance(block.get("data"), str)


def same_as(block: object) -> int | None:
    """The index a compacted image block refers to, or None."""
    if not _is_image(block) or not isinstance(block, Mapping):
        return None
    meta = block.get("_meta")
    ours = meta.get("acpBridge") if isinstance(meta, Mapping) else None
    index = ours.get(SAME_AS) if isinstance(ours, Mapping) else None
    return index if type(index) is int else None


def compact_images(blocks: Sequence[Any]) -> list[Any]:
    """`blocks` with every repeated image (same `data` and `mimeType` as an earlier
    block) replaced by a reference to the first; `expand_images` is the inverse."""
    first: dict[tuple[str, str], int] = {}
    out: list[Any] = []
    for index, block in enumerate(blocks):
        if _is_image(block) and block["data"]:
            key = (block["data"], str(block.get("mimeType")))
            if key in first:
                meta = dict(block.get("_meta") or {})
                meta["acpBridge"] = {**(meta.get("acpBridge") or {}), SAME_AS: first[key]}
                block = {**block, "data": "", "_meta": meta}
            else:
                first[key] = index
        out.append(block)
    return out


def expand_images(blocks: Sequence[Any]) -> list[Any]:
    """The blocks as the client sent them: each image reference gets its bytes back
    (and loses the reference). A reference to nothing usable is left as it is."""
    out: list[Any] = list(blocks)
    for index, block in enumerate(out):
        target = same_as(block)
        if target is None or not 0 <= target < index or not _is_image(out[target]):
            continue
        meta = {k: v for k, v in block["_meta"].items() if k != "acpBridge"}
        ours = {k: v for k, v in block["_meta"]["acpBridge"].items() if k != SAME_AS}
        if ours:
            meta["acpBridge"] = ours
        restored = {k: v for k, v in block.items() if k != "_meta"}
        restored["data"] = out[target]["data"]
        if meta:
            restored["_meta"] = meta
        out[index] = restored
    return out


def has_images(blocks: object) -> bool:
    return isinstance(blocks, Sequence) and not isinstance(blocks, str | bytes) and any(
        isinstance(b, Mapping) and b.get("type") == "image" for b in blocks)
