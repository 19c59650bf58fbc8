"""The failure families of the persistence layer.

One exception class per family, each carrying the session it concerns and a `data()`
dict, so the protocol layer can turn any of them into a JSON-RPC error in one place
without parsing messages.
"""

from __future__ import annotations

from typing import Any


class AcpBridgeError(Exception):
    """The base of every error acp-bridge raises on purpose. It is defined here, in the
    lowest layer, so that the persistence layer's family shares it; the whole tree is
    documented, and the rest of it defined, in acp_bridge/errors.py. `message` is for a
    person, `details` (JSON values) for a program; `bug`: the error says our code is
    wrong (its traceback is logged), not that the world is."""

    bug: bool = False

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class SessionError(AcpBridgeError):
    """Base of every error raised by `session/`."""

    code: str = "session_error"

    def __init__(self, message: str, *, session_id: str | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.session_id = session_id

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code}
        if self.session_id is not None:
            out["sessionId"] = self.session_id
        out.update({k: v for k, v in self.details.items() if v is not None})
        return out


class InvalidSessionIdError(SessionError):
    """The id is not one this store could have issued (and will never touch a path)."""

    code = "invalid_session_id"


class SessionNotFoundError(SessionError):
    code = "session_not_found"


class SessionExistsError(SessionError):
    code = "session_exists"


class SessionLockedError(SessionError):
    """Another live owner (process or handle) has the session open."""

    code = "session_locked"


class SessionCorruptError(SessionError):
    """Damage in the committed region of a log: the session cannot be loaded.

    `details` name where: `offset` (bytes, JSONL) and/or `seq`, plus `reason`.
    """

    code = "session_corrupt"


class SessionVersionError(SessionError):
    """A stored log (or store) at a format version this build does not read."""

    code = "session_version"


class EventDataError(SessionError):
    """Event data that is not JSON (names the event type); nothing was written."""

    code = "event_data"
    bug = True


class InvariantError(SessionError):
    """An append or a log that breaks the log invariants (a programming error)."""

    code = "invariant"
    bug = True


class SequenceError(SessionError):
    """A batch handed to a backend whose seqs do not continue the log."""

    code = "sequence"
    bug = True


class StoreIOError(SessionError):
    """Writing or syncing failed. The backend rolled back to its last durable state
    (`durableSeq`, when known, is the next seq there) and the live log dropped what
    came after it: nothing acknowledged was lost, and nothing dropped is written
    later. The next write starts from the durable state."""

    code = "store_io"


class ForkTurnError(SessionError):
    """A fork asked at a turn the session does not have, or at one still running
    (`details`: `turn`, the turn asked; `turns`, the last turn it may be)."""

    code = "fork_turn"


class StoreUnavailableError(SessionError):
    """The store cannot be opened at all (its folder or database cannot be made or
    read: a full disk, a permission, an I/O error): says which store and why."""

    code = "store_unavailable"


class SessionClosedError(SessionError):
    code = "session_closed"


class SearchIndexError(SessionError):
    """The search index (docs/search.md) cannot be made, opened or written: a folder
    that cannot be written, a database that refuses the index's schema. The store
    itself is fine."""

    code = "search_index"


class SearchQueryError(SessionError):
    """A search query that names nothing to find (only exclusions, or no word at all)."""

    code = "search_query"


# Signals between the search index and its indexer, caught by the indexer: not
# SessionErrors, which the indexer takes for a log it cannot read (the session is
# listed as damaged), where these mean "make the index again" and "read the log again".


class IndexDamaged(AcpBridgeError):
    """The index itself is damaged (its database says so): the indexer makes it again."""


class IndexUnwritable(AcpBridgeError):
    """The index cannot be written now (its disk is full, read-only or failing): each
    write is one transaction, so it holds what it held before. The indexer ends its
    pass and says so; a search answers from what the index holds."""


class Rewound(AcpBridgeError):
    """The log no longer holds what the index read up to (cut, replaced, rewritten):
    the indexer reads it again from its start. Raised by a feed, caught by the indexer."""
