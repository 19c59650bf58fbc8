"""Session ids as every store issues and checks them: a lowercase UUID, which can never
name a path outside the store (`validate_session_id` is the check at each way in), and
the `<id>.jsonl` files a folder of them holds (a JSONL store's logs, a SQLite store's
tail files).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from session.errors import InvalidSessionIdError

_SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_session_id(value: object) -> bool:
    """Whether `value` is an id this store issues (a lowercase UUID)."""
    return isinstance(value, str) and _SESSION_ID.fullmatch(value) is not None


def session_files(folder: os.PathLike[str] | str) -> Iterator[tuple[str, os.stat_result]]:
    """Each `<id>.jsonl` in `folder` (a JSONL store's logs, a SQLite store's tail files)
    and its stat, one scan: nothing when the folder is missing; a file gone between
    the scan and its stat is passed over."""
    try:
        entries = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    with entries:
        for entry in entries:
            sid = entry.name[:-6]
            if entry.name.endswith(".jsonl") and is_session_id(sid):
                try:
                    yield sid, entry.stat()
                except FileNotFoundError:  # deleted, or moved into the database, meanwhile
                    continue


def validate_session_id(session_id: object) -> str:
    """Return `session_id` if it is an id this store issues (a lowercase UUID): such an
    id can never name a path outside the store. Raises InvalidSessionIdError."""
    if not isinstance(session_id, str) or not is_session_id(session_id):
        shown = repr(session_id)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise InvalidSessionIdError(
            f"invalid session id {shown}: session ids are lowercase UUIDs issued by the agent",
            session_id=None,
            given=shown,
        )
    return session_id
