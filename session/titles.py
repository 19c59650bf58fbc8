"""A session's title: the one rule every store keeps (`session_title`: the last `/title`,
else the header's, else the first prompt's), and its parts, for the stores' writers and
readers, `acp-bridge sessions`, the agent's live title and replay. Pure: events in,
text out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from session.events import CONFIG_SET, JSON, TITLE_CONFIG, USER_MESSAGE, Header

TITLE_LIMIT = 80


def first_prompt_title(event: Any) -> str | None:
    """The session's title if `event` is its first prompt (turn 1's `user/message`):
    that prompt's first text (`title_from_content`). None for every other event, and for
    a first prompt without text: a later prompt never names the session.

    The one rule of every store's `list` (whatever events come before the first turn: a
    wrapped agent's updates, a setting changed), their readers' `peek`, and `acp-bridge
    sessions`; it is the title our agent sends live (`session_info_update`) too. Turn 1
    and not "the first prompt with text", so a reader can stop at the first prompt."""
    if not isinstance(event, dict) or event.get("type") != USER_MESSAGE:
        return None
    data = event.get("data")
    if not isinstance(data, dict) or data.get("turn") != 1:
        return None
    return title_from_content(data.get("content"))


def set_title(event: Any) -> str | None:
    """The title `event` gives the session if it is a `config/set session/title` (our
    `/title` command's, acp_bridge.host.commands); None for every other event."""
    if not isinstance(event, dict) or event.get("type") != CONFIG_SET:
        return None
    data = event.get("data")
    if not isinstance(data, dict) or data.get("configId") != TITLE_CONFIG:
        return None
    value = data.get("value")
    return value if isinstance(value, str) and value else None


def last_set_title(events: Iterable[Any]) -> str | None:
    """The title the last `config/set session/title` of `events` sets, if any (what a
    store's title becomes when it writes a batch of them)."""
    found = None
    for event in events:
        if isinstance(event, dict) and event.get("type") == CONFIG_SET:  # a stream's chunks: skipped here
            found = set_title(event) or found
    return found


def session_title(header: Header | dict[str, Any], events: Iterable[Any]) -> str | None:
    """The one rule of a session's title, in every store's `list`, their readers and
    `acp-bridge sessions`: the value of its last `config/set session/title` (`/title`),
    else the title its header was created with, else its first prompt's title
    (`first_prompt_title`); None when none of them gives one. The stores keep it as they
    write (a column, a field, JSONL's title file) rather than reading whole logs; this is
    the rule they keep, for whole reads and for the tests. Replay names a session the
    same way (acp_bridge.host.replay), a wrapped agent's own title between the header's
    and the first prompt's."""
    named, prompt = None, None
    for event in events:
        named = set_title(event) or named
        if prompt is None:
            prompt = first_prompt_title(event)
    return titled(named, header, prompt)


def titled(named: str | None, header: Header | dict[str, Any], prompt: str | None) -> str | None:
    """`session_title`'s order, for a reader that found its parts itself: the last
    `/title`, else the header's title, else the first prompt's."""
    given = header.get("title")
    return named or (given if isinstance(given, str) and given else None) or prompt


def title_from_content(content: JSON) -> str | None:
    """A session title from a prompt: its first text, whitespace folded, cut short."""
    if not isinstance(content, list):
        return None
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text":
            text = " ".join(str(block.get("text", "")).split())
            if text:
                return text if len(text) <= TITLE_LIMIT else text[: TITLE_LIMIT - 1] + "…"
    return None
