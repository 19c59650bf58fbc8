"""Event rows of the SQL stores (`seq, type, time, data`, the data JSON text) read back:
as the store's records (`row_events`, a load's inner loop), and as the JSONL backend's
lines (`raw_pieces`, for `raw_chunks`). One copy for SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import orjson

from session.events import EVENT_TYPES, Event
from session.scan import Damage, check_event_shape

# A row as the drivers give it: SQLite may give the data as `str` (a TEXT value).
Row = tuple[int, str, int, bytes | str]


def row_events(rows: list[Row]) -> list[Event | Damage]:
    """`row_event` of each row, inlined for the common case (a load is this loop)."""
    loads, types = orjson.loads, EVENT_TYPES
    out: list[Event | Damage] = []
    append = out.append
    for row in rows:
        seq, etype, stamp, data = row
        if etype in types and type(seq) is int and type(stamp) is int:
            try:
                parsed = loads(data)
            except (orjson.JSONDecodeError, TypeError):
                append(row_event(row))  # says what is wrong
                continue
            if type(parsed) is dict:
                # `etype` is one of EVENT_TYPES (checked above): an EventType.
                append({"type": etype, "seq": seq, "time": stamp, "data": parsed})  # type: ignore[arg-type]
                continue
        append(row_event(row))
    return out


def row_event(row: Row) -> Event | Damage:
    seq, etype, stamp, data = row
    try:
        parsed = orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError) as exc:
        return Damage(f"{etype} row data is not valid JSON ({exc})")
    return check_event_shape({"type": etype, "seq": seq, "time": stamp, "data": parsed})


def as_bytes(value: object) -> bytes:
    """A stored text as bytes (SQLite gives back `str` for a TEXT value, None for NULL)."""
    if isinstance(value, bytes):
        return value
    return b"" if value is None else str(value).encode("utf-8")


def raw_pieces(fetch: Callable[[], Sequence[Row]], piece_bytes: int) -> Iterator[bytes]:
    """The rows `fetch` gives (a batch a call, empty at the end) as JSONL lines, the data
    text verbatim, joined in pieces of about `piece_bytes`: bounded memory however big
    the log."""

    def lines() -> Iterator[bytes]:
        while rows := fetch():
            for seq, etype, stamp, data in rows:
                yield b'{"type":%s,"seq":%d,"time":%d,"data":%s}\n' % (
                    orjson.dumps(etype), seq, stamp, as_bytes(data))

    return pieces(lines(), piece_bytes)


def pieces(lines: Iterable[bytes], piece_bytes: int) -> Iterator[bytes]:
    """`lines` joined in pieces of about `piece_bytes` (a piece ends with a whole line)."""
    piece: list[bytes] = []
    size = 0
    for line in lines:
        piece.append(line)
        size += len(line)
        if size >= piece_bytes:
            yield b"".join(piece)
            piece, size = [], 0
    if piece:
        yield b"".join(piece)
