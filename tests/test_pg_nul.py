"""A NUL in a PostgreSQL store (issue 34, point 3): the echo model repeats a prompt's
NUL into its answer, and PostgreSQL's `json` keeps it escaped (`\\u0000`), but its
text type cannot hold it, so anything that takes such a value apart in SQL fails. One
such message must not break `sessions list` (exit 0, the session listed with its
tokens, as from its log) nor the served list; a NUL in a filter of the served search
page is a filter that finds nothing, not a 500."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from session import SessionStore, open_backend
from tests.support.html_sessions import Served, fetch
from tests.support.logs import Script
from tests.test_sessions_cli import cli

pytestmark = pytest.mark.integration

KIND = "postgres"


def stored(dsn: str, tmp_path: Path, script: Script, **create: Any) -> str:
    """A session of `script`'s events in the store at `dsn`; its id."""
    store = SessionStore(open_backend(KIND, dsn))
    try:
        log = store.create(cwd=str(tmp_path), **create)
        log.extend(script.items)
        log.sync()
        log.close()
        return log.id
    finally:
        store.close()


def nul_session(dsn: str, tmp_path: Path) -> str:
    """A session whose assistant message (with usage) holds a NUL, as the echo model's."""
    script = Script().start_turn("a\x00b").start_step()
    script.add("assistant/message", {"turn": 1, "step": 1, "content": [{"type": "text", "text": "a\x00b"}],
                                     "usage": {"inputTokens": 3, "outputTokens": 2}})
    return stored(dsn, tmp_path, script.end_step().end_turn())


def wrapped_nul_session(dsn: str, tmp_path: Path) -> str:
    """A wrapped agent's session whose agent named itself with a NUL (in the header)."""
    return stored(dsn, tmp_path, Script().text_turn("hi", "hello"),
                  additional_directories=[str(tmp_path / "more")],
                  wrapped={"command": ["agent"], "agentInfo": {"name": "ev\x00il", "version": "1"}})


def test_a_nul_in_an_assistant_message_or_a_header_lists(pg_dsn: str, tmp_path: Path) -> None:
    sid, wrapped = nul_session(pg_dsn, tmp_path), wrapped_nul_session(pg_dsn, tmp_path)
    result = cli("--store", pg_dsn, "--backend", KIND, "list", "--json")
    assert result.code == 0, result.err
    rows = {row["id"]: row for row in orjson.loads(result.raw)}
    assert set(rows) == {sid, wrapped}
    assert rows[sid]["status"] == "completed" and rows[wrapped]["status"] == "completed"
    assert rows[sid]["tokens"]["inputTokens"] == 3, rows[sid]
    text = cli("--store", pg_dsn, "--backend", KIND, "list")
    assert text.code == 0 and sid[:8] in text.out and wrapped[:8] in text.out, text.err
    # session/list's query (the agent's), which reads the header's additionalDirectories
    backend = open_backend(KIND, pg_dsn)
    try:
        listed = {s["id"]: s for s in backend.list_sessions()}
    finally:
        backend.close()
    assert listed[wrapped].get("additionalDirectories") == [str(tmp_path / "more")]
    assert "additionalDirectories" not in listed[sid]


def test_the_served_list_and_a_nul_in_the_search_filters(pg_dsn: str, tmp_path: Path) -> None:
    sid, wrapped = nul_session(pg_dsn, tmp_path), wrapped_nul_session(pg_dsn, tmp_path)
    with Served(pg_dsn, KIND) as served:
        status, _, listed = fetch(served.url)
        assert status == 200 and f"session/{sid}" in listed and f"session/{wrapped}" in listed
        status, _, found = fetch(served.url + "search?q=hello")
        assert status == 200 and f"session/{wrapped}#turn-1" in found
        for field in ("agent", "model"):
            status, _, body = fetch(served.url + f"search?q=hello&{field}=ev%00il")
            assert status == 200, (field, body)
            assert "No turn matches." in body
        assert fetch(served.url + "search?q=hello&cwd=ev%00il")[0] == 400  # no folder's name holds a NUL
    assert served.returncode == 0
    assert "Error" not in served.stderr
