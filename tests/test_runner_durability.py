"""When the runner makes the log durable (DESIGN.md section 3, docs/protocol.md
"Durability of a turn"): before calling a model that leaves the process or can keep
the turn waiting (`Model.external`), everything is fsync'd; before an in-process model,
the turn is only handed to the OS (on disk for any reader, kept through a kill -9 of
the agent) and fsync'd with the step's end. And where the durable commits run: on the
event loop when the commit is small and no other turn runs, else in a worker thread."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.agent import turn_writer
from acp_bridge.agent.runner import TurnRunner
from acp_bridge.models import Finish, ModelChunk, ModelRequest, TextDelta
from acp_bridge.models.echo import EchoModel
from acp_bridge.models.script import ScriptModel
from session import SessionLog, SessionStore, check_invariants
from session.backends.jsonl import JsonlBackend, JsonlSession


class Probe:
    """A model that records, when it is called, what of the log is durable and what is
    in the file; then streams one word."""

    name = "probe"
    context_window: int | None = None

    def __init__(self, external: bool | None, log: SessionLog, path: Path) -> None:
        if external is not None:
            self.external = external
        self.log, self.path = log, path
        self.seen: list[dict[str, Any]] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        lines = self.path.read_text().splitlines()
        self.seen.append({"pending": self.log.pending, "buffered": self.log.buffered,
                          "on_disk": [line for line in lines if '"user/message"' in line]})
        yield TextDelta("ok ")
        yield Finish("stop")


@pytest.fixture
def jsonl_store(tmp_path: Path) -> tuple[SessionStore, JsonlBackend]:
    backend = JsonlBackend(tmp_path / "store")
    return SessionStore(backend), backend


def run_turns(log: SessionLog, model: Any, prompts: int = 1) -> None:
    async def main() -> None:
        runner = TurnRunner(log, model, None)  # type: ignore[arg-type]  # no tools used
        for n in range(prompts):
            end = await runner.prompt([{"type": "text", "text": f"prompt {n}"}])
            assert end["data"]["reason"] == {"kind": "completed"}

    anyio.run(main)
    check_invariants(log.events, closed=True)


@pytest.mark.parametrize(("external", "durable_before_model"), [(True, True), (None, True), (False, False)])
def test_the_turn_is_durable_before_an_external_model_and_on_disk_before_a_local_one(
    jsonl_store: tuple[SessionStore, JsonlBackend], tmp_path: Path, external: bool | None, durable_before_model: bool
) -> None:
    sessions, backend = jsonl_store
    log = sessions.create(cwd=str(tmp_path))
    model = Probe(external, log, backend.path_of(log.id))
    run_turns(log, model, prompts=2)
    for n, seen in enumerate(model.seen):
        # Either way the prompt is in the file when the model runs (a kill -9 keeps it) ...
        assert len(seen["on_disk"]) == n + 1
        assert seen["buffered"] == 0
        # ... but it is fsync'd first only for a model outside the agent (or one that
        # does not say: external is the default).
        assert (seen["pending"] == 0) is durable_before_model
    assert log.pending == 0  # the turn's end is durable in both cases
    log.close()


def test_which_models_are_external(tmp_path: Path) -> None:
    assert EchoModel.external is False
    assert ScriptModel([{"text": "a b"}]).external is False
    assert ScriptModel([{"text": "a b"}], chunk_delay_ms=5).external is True
    assert ScriptModel([{"text": "a"}, {"text": "b", "hang": True}]).external is True
    from acp_bridge.models.openai import OpenAIModel

    assert OpenAIModel("m").external is True


def fsync_threads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(thread ident, events) of every durable write to a JSONL session."""
    calls: list[tuple[int, int]] = []
    write = JsonlSession.write

    def spy(self: JsonlSession, batch: Any, *, sync: bool) -> Any:
        if sync:
            calls.append((threading.get_ident(), len(batch)))
        return write(self, batch, sync=sync)

    monkeypatch.setattr(JsonlSession, "write", spy)
    return calls


def test_small_commits_run_on_the_event_loop_when_one_turn_runs(
    jsonl_store: tuple[SessionStore, JsonlBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fsync_threads(monkeypatch)
    log = jsonl_store[0].create(cwd=str(tmp_path))
    run_turns(log, EchoModel(), prompts=3)
    assert len(calls) == 3  # one durable commit per one-word echo turn
    assert {ident for ident, _ in calls} == {threading.get_ident()}
    log.close()


def test_big_commits_and_commits_beside_other_turns_go_to_a_worker_thread(
    jsonl_store: tuple[SessionStore, JsonlBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fsync_threads(monkeypatch)
    log = jsonl_store[0].create(cwd=str(tmp_path))
    words = " ".join(["w"] * (turn_writer.INLINE_SYNC_EVENTS + 10))
    model = EchoModel()

    async def main() -> None:
        runner = TurnRunner(log, model, None)  # type: ignore[arg-type]
        await runner.prompt([{"type": "text", "text": words}])  # a step of 74 chunks
        runner.tuning.running_turns += 1  # as if a turn of another session were running
        try:
            await runner.prompt([{"type": "text", "text": "hi"}])
        finally:
            runner.tuning.running_turns -= 1
        assert runner.tuning.running_turns == 0

    anyio.run(main)
    assert len(calls) == 2
    assert all(ident != threading.get_ident() for ident, _ in calls)
    log.close()
