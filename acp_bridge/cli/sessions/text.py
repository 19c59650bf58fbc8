"""Text helpers for `acp-bridge sessions`: text from a log made safe and short for a
terminal (control characters shown escaped), times, token counts, content blocks,
tool arguments and diffs. Shared by the view model and both renderings."""

from __future__ import annotations

from acp_bridge.cli.safe_text import clean

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from typing import Any

# show: how much of a tool's result to print without --full.
SHOW_LINES = 12
SHOW_LINE_CHARS = 200


USAGE_KEYS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens",
               "reasoningTokens")


def add_usage(total: dict[str, int], usage: Mapping[str, Any]) -> None:
    for key in USAGE_KEYS:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def token_text(usage: dict[str, int]) -> str:
    text = f"{usage.get('inputTokens', 0):,} in / {usage.get('outputTokens', 0):,} out"
    extra = [
        f"{usage[key]:,} {label}"
        for key, label in (("cacheReadTokens", "cache read"), ("cacheWriteTokens", "cache write"),
                           ("reasoningTokens", "reasoning"))
        if usage.get(key)
    ]
    return text + (f" ({', '.join(extra)})" if extra else "")


def tokens_json(usage: dict[str, int]) -> dict[str, int]:
    out = {"inputTokens": usage.get("inputTokens", 0), "outputTokens": usage.get("outputTokens", 0)}
    # In USAGE_KEYS' order, whatever order a log reported them in: the same JSON from a
    # log as from the search index's sums (`sessions list`).
    out.update({k: usage[k] for k in USAGE_KEYS[2:] if usage.get(k)})
    return out


def one_line(text: str) -> str:
    return " ".join(clean(text).split())


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def local_time(ms: int | None, *, seconds: bool = True) -> str:
    import time

    if ms is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M",
                         time.localtime(ms / 1000))


def iso_time(ms: int) -> str:
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(ms / 1000))
    return stamp[:-2] + ":" + stamp[-2:] if stamp[-5:-4] in "+-" else stamp


def json_text(value: Any) -> str:
    """Compact JSON of tool arguments (the model's JSON text is re-encoded if it parses)."""
    import orjson

    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return clean(value)
    try:
        return clean(orjson.dumps(value).decode())
    except TypeError:
        return clean(repr(value))


def block_text(block: Any) -> str:
    """A content block (ACP or a tool result's) as text; non-text blocks as a [tag]."""
    if not isinstance(block, dict):
        return clean(str(block))
    kind = block.get("type")
    if kind == "text":
        return clean(str(block.get("text", "")))
    if kind in ("image", "audio"):
        return tag(kind, block.get("mimeType"))
    if kind == "resource_link":
        return tag("link", block.get("name") or block.get("title"), block.get("uri"))
    if kind == "resource":
        resource = block.get("resource") or {}
        head = tag("resource", resource.get("uri"))
        if isinstance(resource.get("text"), str):
            return head + "\n" + clean(resource["text"])
        return head
    return tag(kind)


def tag(*words: Any) -> str:
    return "[" + " ".join(one_line(str(w)) for w in words if w) + "]"


def blocks_text(blocks: Any) -> str:
    if not isinstance(blocks, list):
        return ""
    return "\n".join(block_text(b) for b in blocks)


def permission_text(permission: Any) -> str | None:
    """A decision about a tool call in a few words, and who made it: the option the
    person chose (`allow_once, by the user`), `cancelled`, a request that failed with
    what the client said (`error -32603 (its message)`, `invalid (...)`), or the agent's
    own without asking: an "always allow" rule and which (`allow_always, by the rule:
    every write_file call`), the mode (`allowed, by the mode accept_edits`)."""
    if not isinstance(permission, dict):
        return None
    by = permission.get("by")
    if by == "rule":
        rule = permission.get("rule")
        rule = rule if isinstance(rule, dict) else {}
        which = f"the command `{rule['command']}`" if isinstance(rule.get("command"), str) \
            else f"every {rule.get('name', '?')} call"
        return one_line(f"{permission.get('optionId', 'allow_always')}, by the rule allowing {which} "
                        "(an earlier answer)")
    if by == "mode":
        return one_line(f"{permission.get('outcome')}, by the mode {permission.get('mode', '?')}")
    if permission.get("outcome") == "selected" and permission.get("optionId"):
        return one_line(f"{permission['optionId']}, by the user")
    words = [str(permission.get("outcome")), *([str(permission["code"])] if "code" in permission else [])]
    if isinstance(permission.get("message"), str):
        words.append(f"({permission['message']})")
    return one_line(" ".join(words))


def unified(path: str, old: str | None, new: str) -> list[str]:
    import difflib

    lines = difflib.unified_diff(
        (old or "").splitlines(), new.splitlines(),
        fromfile="/dev/null" if old is None else path, tofile=path, lineterm="",
    )
    return [clean(line) for line in lines]


def diff_summary(path: str, old: str | None, new: str) -> str:
    lines = unified(path, old, new)[2:]
    added = sum(1 for line in lines if line.startswith("+"))
    removed = sum(1 for line in lines if line.startswith("-"))
    what = "new file" if old is None else "diff"
    return f"{what} {one_line(path)} (+{added} -{removed} lines)"


def head_lines(text: str, full: bool) -> list[str]:
    lines = text.rstrip("\n").split("\n") if text.strip() else ["(empty)"]
    if full:
        return lines
    shown = [cut(line, SHOW_LINE_CHARS) for line in lines[:SHOW_LINES]]
    if len(lines) > SHOW_LINES:
        shown.append(f"… ({len(lines) - SHOW_LINES} more lines; --full shows all)")
    return shown


def indent(lines: Iterable[str], pad: str) -> list[str]:
    return [pad + line if line else pad.rstrip() for line in lines]




# --- long text, a piece at a time ------------------------------------------------------
#
# A model's answer can be tens of megabytes (one long streamed step). `Lines` prints it
# as `indent(clean(text.strip()).split("\n"), pad)` would, without those copies of the
# whole text: line by line, a long line in slices, each cleaned on its own (`clean`
# works character by character; its "\r\n" -> "\n" is done by dropping the "\r" that
# ends a line).

PIECE = 1 << 16  # characters per slice of a long line


def _kept_space(ch: str) -> bool:
    """Whitespace that `clean` leaves as it is (so `str.rstrip` after it would strip)."""
    code = ord(ch)
    return ch.isspace() and (code == 0x09 or 0x20 <= code < 0x7F or code > 0x9F)


class Lines:
    """`text` as lines, each after `pad`, cleaned; `strip` drops leading and trailing
    whitespace first, `rstrip` each line's trailing whitespace after (an empty line
    is `pad.rstrip()`, as `indent` writes it)."""

    __slots__ = ("end", "pad", "rstrip", "start", "text")

    def __init__(self, text: str, pad: str = "", *, strip: bool = False, rstrip: bool = False) -> None:
        start, end = 0, len(text)
        if strip:
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
        self.text, self.start, self.end, self.pad, self.rstrip = text, start, end, pad, rstrip

    def __bool__(self) -> bool:
        return self.end > self.start

    def pieces(self) -> Iterator[str]:
        """The lines, each ending with a newline, in pieces of at most about PIECE."""
        text, pos, end = self.text, self.start, self.end
        while True:
            stop = text.find("\n", pos, end)
            last = stop < 0
            line_end = end if last else stop
            if not last and line_end > pos and text[line_end - 1] == "\r":
                line_end -= 1  # "\r\n" ends the line, as clean's replace makes it
            if self.rstrip:
                while line_end > pos and _kept_space(text[line_end - 1]):
                    line_end -= 1
            if line_end == pos:
                yield self.pad.rstrip() + "\n"
            else:
                head = True
                for at in range(pos, line_end, PIECE):
                    piece = clean(text[at:min(at + PIECE, line_end)])
                    yield (self.pad + piece) if head else piece
                    head = False
                yield "\n"
            if last:
                return
            pos = stop + 1
