"""A session's time and readability as `sessions list` and `stats` tell them (issue 36,
point 6): "updated" is the last event's time whatever the file's mtime (a copied store
keeps its order), and a log the store refuses (permission denied) is listed as such,
not "damaged", and left out of `stats` with a word."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import orjson
import pytest

from session import open_backend
from session.backends.jsonl_read import JsonlReader
from session.backends.jsonl_time import last_time, last_time_in
from tests.test_sessions_cli import BASE_MS, cli, record

HEADER = b'{"type":"session","version":0,"id":"x","createdAt":1000,"cwd":"/"}\n'


def line(seq: int, time: int, text: str = "") -> bytes:
    return orjson.dumps({"type": "assistant/chunk", "seq": seq, "time": time,
                         "data": {"turn": 1, "step": 1, "kind": "text", "text": text}}) + b"\n"


@pytest.mark.parametrize(("log", "expected"), [
    (HEADER, 1000),  # no event yet: when it was made
    (HEADER + line(0, 2000) + line(1, 3000), 3000),
    (HEADER + line(0, 2000) + line(1, 3000, "x" * 100_000), 3000),  # a last line past the first read
    (HEADER + line(0, 2000) + line(1, 3000, "x" * 9000)[:5000], 3000),  # a torn tail: its head counts
    (HEADER + line(0, 2000, '{"type":"t","seq":1,"time":9}'), 2000),  # a head inside a string is escaped
    (b"not a log\n", None),
])
def test_last_time_is_read_from_the_tail(log: bytes, expected: int | None) -> None:
    assert last_time_in(io.BytesIO(log), len(log)) == expected


def test_last_time_falls_back_when_the_file_says_nothing(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_bytes(b"junk\n")
    assert last_time(tmp_path / "bad.jsonl", 7) == 7
    assert last_time(tmp_path / "missing.jsonl", 8) == 8


def test_a_copied_store_keeps_its_order_and_times(tmp_path: Path) -> None:
    original, work = tmp_path / "original", tmp_path / "work"
    work.mkdir()
    older = record(original, "jsonl", work, [{"text": "a"}], ["first"], base_ms=BASE_MS)
    newer = record(original, "jsonl", work, [{"text": "b"}], ["second"], base_ms=BASE_MS + 60_000)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, copy_function=shutil.copyfile)  # every mtime: now
    now = os.stat(copy / "sessions" / f"{older}.jsonl").st_mtime_ns
    os.utime(copy / "sessions" / f"{newer}.jsonl", ns=(now - 10**9, now - 10**9))  # copied first
    ended = {sid: orjson.loads((original / "sessions" / f"{sid}.jsonl").read_bytes().splitlines()[-1])["time"]
             for sid in (older, newer)}
    listed = orjson.loads(cli("--store", str(copy), "list", "--json").out)
    assert [(item["id"], item["updatedAt"]) for item in listed] == [(newer, ended[newer]), (older, ended[older])]
    # the same for a first page (ordered by the stamps) and for ACP's session/list
    assert [item["id"] for item in orjson.loads(cli("--store", str(copy), "list", "-n", "1", "--json").out)] == [newer]
    backend = open_backend("jsonl", copy)
    try:
        from session import SessionStore

        assert [(s["id"], s["updatedAt"]) for s in SessionStore(backend).list()] == [
            (newer, ended[newer]), (older, ended[older])]
    finally:
        backend.close()
    shown = cli("--store", str(copy), "show", older).out
    assert "updated" in shown and str(now // 10**9) not in shown


def test_a_log_refused_to_this_user_is_unreadable_not_damaged(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    fine = record(store, "jsonl", work, [{"text": "a"}], ["readable"])
    refused = record(store, "jsonl", work, [{"text": "b"}], ["refused"], base_ms=BASE_MS + 60_000)
    stream = JsonlReader.stream

    def denied(self: JsonlReader, session_id: str, at: object = None) -> object:
        if session_id == refused:  # as chmod 000 refuses anyone but root (the tests run as root)
            path = self.path_of(session_id)
            raise PermissionError(13, "Permission denied", str(path))
        return stream(self, session_id, at)  # type: ignore[arg-type]

    monkeypatch.setattr(JsonlReader, "stream", denied)
    listed = {item["id"]: item for item in orjson.loads(cli("--store", str(store), "list", "--json").out)}
    assert listed[refused]["status"] == "unreadable" and "Permission denied" in listed[refused]["error"]
    assert listed[fine]["status"] == "completed"
    table = cli("--store", str(store), "list")
    assert next(r for r in table.lines if r.startswith(refused)).split()[3:5] == ["?", "unreadable"]
    for _ in range(2):  # the first pass finds it, the next one still says it (the index kept it)
        stats = cli("--store", str(store), "stats", "--by", "none", "--json")
        assert stats.code == 0
        assert orjson.loads(stats.out)["total"]["turns"] == 1
        assert (f"session {refused} cannot be read, so its turns are left out of these sums: "
                "cannot read: [Errno 13] Permission denied") in stats.err, stats.err


def test_a_first_page_reads_the_tails_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mtime bounds a log's last event from above: an untouched store reads about a
    page of tails to order its first page, a copied one all of them."""
    from acp_bridge.cli.sessions.rows import newest_first
    from acp_bridge.cli.sessions.source import Source
    from session.backends import jsonl_time

    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    ids = [record(store, "jsonl", work, [{"text": "a"}], [f"p{n}"], base_ms=BASE_MS + n * 60_000) for n in range(6)]
    read: list[str] = []
    tail_time = jsonl_time.tail_time

    def counted(path: Path | str, size: int, fallback: int) -> int:
        read.append(Path(path).stem)
        return tail_time(path, size, fallback)

    monkeypatch.setattr(jsonl_time, "tail_time", counted)
    source = Source("jsonl", store)
    try:
        assert newest_first(source, source.reader.stamps(), 2)[:2] == [ids[5], ids[4]]
        assert read == [ids[5], ids[4]]  # the third's mtime is older than the second's time: not read
        for sid in ids:  # copied: every mtime now, the oldest copied last
            os.utime(store / "sessions" / f"{sid}.jsonl")
        read.clear()
        assert newest_first(source, source.reader.stamps(), 2)[:2] == [ids[5], ids[4]]
        assert sorted(read) == sorted(ids)
    finally:
        source.close()
