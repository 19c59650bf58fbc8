"""`session/list`: the stored sessions as ACP `SessionInfo`s, a page at a time.

The store lists sessions newest first; a page is the next `LIST_PAGE` after the
cursor. The cursor is the (updatedAt, id) position of the last session of the
previous page, opaque to the client (base64 of JSON), so a page stays right when
sessions are added or touched between two calls.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Sequence
from typing import Any

import orjson

from acp_bridge.errors import InvalidParamsError
from session.backends.base import SessionSummary

LIST_PAGE = 50


def list_page(sessions: Sequence[SessionSummary], cursor: str | None) -> dict[str, Any]:
    """The `session/list` result for `sessions` (newest first) after `cursor`."""
    start = 0
    if cursor is not None:
        after = decode_cursor(cursor)
        start = next((i for i, s in enumerate(sessions) if (-s["updatedAt"], s["id"]) > after), len(sessions))
    page = sessions[start : start + LIST_PAGE]
    result: dict[str, Any] = {"sessions": [session_info(s) for s in page]}
    if start + LIST_PAGE < len(sessions):
        last = page[-1]
        result["nextCursor"] = encode_cursor((-last["updatedAt"], last["id"]))
    return result


def session_info(summary: SessionSummary) -> dict[str, Any]:
    """A stored session as an ACP `SessionInfo`."""
    info: dict[str, Any] = {"sessionId": summary["id"], "cwd": summary["cwd"], "title": summary["title"],
                            "updatedAt": iso_time(summary["updatedAt"])}
    if summary.get("additionalDirectories"):
        info["additionalDirectories"] = summary["additionalDirectories"]
    return info


def iso_time(ms: int) -> str:
    """ISO 8601 UTC with milliseconds, always the same width (so the strings sort)."""
    stamp = datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC)
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def encode_cursor(position: tuple[int, str]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(position))).decode()


def decode_cursor(cursor: str) -> tuple[int, str]:
    """The position in `cursor`; InvalidParamsError if it is not one we made."""
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
        if isinstance(value, list) and len(value) == 2 and type(value[0]) is int and isinstance(value[1], str):
            return value[0], value[1]
    except (ValueError, orjson.JSONDecodeError):
        pass
    raise InvalidParamsError("invalid cursor: pass back the nextCursor of a previous answer", field="cursor")
