"""The search index of `sessions serve` kept up to date in a thread of its own
(acp_bridge/cli/sessions/keeper.py, issue 35 "search at the anchors' speed"): a search
answers from the index without a pass over the store in its own thread (a pass with
nothing new is 10,000 `stat`s on a store of 10,000 sessions), a turn is found soon after
its `turn/end`, and the passes stop when nobody searches."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.cli.sessions import keeper
from acp_bridge.cli.sessions.serve import Site
from session.backends.jsonl_read import JsonlReader
from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session, append_turn


def hits_of(site: Site, words: str) -> list[str]:
    status, body = site.search_page("", {"q": [words]})
    assert status == 200
    return [part.split('"', 1)[0] for part in "".join(body).split('<li><a href="session/')[1:]]


def test_a_search_takes_no_pass_over_the_store_in_its_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    sid = add_session(root, "jsonl", str(tmp_path), Script().text_turn("the pelican"), DAY0)
    passes: list[str] = []
    stamps = JsonlReader.stamps

    def counted(self: Any) -> Any:
        passes.append(threading.current_thread().name)
        return stamps(self)

    monkeypatch.setattr(JsonlReader, "stamps", counted)
    site = Site("jsonl", root, "token")
    try:
        assert [h.split("#")[0] for h in hits_of(site, "pelican")] == [sid]  # waited for the first pass
        before = len(passes)
        for _ in range(5):
            assert len(hits_of(site, "pelican")) == 1
        assert threading.current_thread().name not in passes  # never in the searching thread
        assert len(passes) - before <= 2  # the keeper's own passes, every 0.5 s at most
        # A turn that ends is found soon, without a search asking for a pass.
        append_turn(root, "jsonl", sid, "and the heron", "yes", DAY0 + 60_000)
        deadline = time.monotonic() + 10
        while not hits_of(site, "heron"):
            assert time.monotonic() < deadline, "the new turn was not found within 10 s"
            time.sleep(0.1)
    finally:
        site.close()


def test_the_passes_stop_without_searches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    add_session(root, "jsonl", str(tmp_path), Script().text_turn("the pelican"), DAY0)
    monkeypatch.setattr(keeper, "IDLE", 0.3)
    monkeypatch.setattr(keeper, "EVERY", 0.05)
    site = Site("jsonl", root, "token")
    try:
        assert len(hits_of(site, "pelican")) == 1
        time.sleep(1.0)
        kept = site.keeper
        assert kept is not None and kept._idle  # the test looks inside
        passes = kept._passes
        time.sleep(0.5)
        assert kept._passes == passes  # none while idle
        assert len(hits_of(site, "pelican")) == 1  # a search wakes it, and waits for a pass
        assert kept._passes > passes
    finally:
        site.close()
