"""Files are never silently damaged (issue 13): the file tools, through the local file
system and through a client's `fs/*` (AcpClientServices over a fake connection), leave
every byte outside the change as it was or refuse with a tool error, never show a diff
other than what is written, and say so when a file is not UTF-8 text.

Each case is a file's bytes on disk, a call through the real tools (plan, as the runner
does before asking permission, then run), and the exact bytes on disk afterwards.
"""

from __future__ import annotations

import errno
import os
import random
import stat
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from acp_bridge.agent.client_services import AcpClientServices
from acp_bridge.agent.runner import TurnRunner
from acp_bridge.errors import ToolError
from acp_bridge.models.script import ScriptModel
from acp_bridge.rpc.connection import Connection
from acp_bridge.tools.base import (
    JSON,
    PermissionOutcome,
    PermissionRequest,
    Tool,
    ToolContext,
    ToolOutcome,
)
from acp_bridge.tools.files import EditFile, ReadFile, WriteFile
from acp_bridge.tools.local import LocalServices, read_text, write_text
from session import Event, SessionStore
from session.backends.jsonl import JsonlBackend
from tests.support.services import ScriptedClient

pytestmark = pytest.mark.anyio

LATIN1 = b"caf\xe9 = 1\n"
# A small binary file with "= 1" in it, as in the issue: NULs and bytes that are not UTF-8.
BINARY = bytes(range(256))[:60] + b" = 1 " + bytes(range(255, 186, -1))
REAL_FFFD = "x = 1  # \ufffd stays\n".encode()
BOM = b"\xef\xbb\xbfx = 1\ny = 2\n"
CRLF = b"one\r\nx = 1\r\nthree\r\n"


class FakeClientConnection:
    """A client's `fs/*`: reads the file from disk and decodes it as `decode` says (a
    careless client replaces undecodable bytes with U+FFFD), writes text as UTF-8.
    `files` replaces the disk for a client whose files are not on this machine."""

    def __init__(
        self, decode: Callable[[bytes], str], files: dict[str, bytes] | None = None
    ) -> None:
        self.decode = decode
        self.files = files
        self.writes: list[str] = []

    async def request(self, method: str, params: Any) -> Any:
        path = params["path"]
        if method == "fs/read_text_file":
            data = self.files[path] if self.files is not None else Path(path).read_bytes()
            text = self.decode(data)
            if "line" in params or "limit" in params:
                lines = text.splitlines(keepends=True)
                first = params.get("line", 1) - 1
                text = "".join(lines[first : first + params.get("limit", len(lines))])
            return {"content": text}
        if method == "fs/write_text_file":
            self.writes.append(path)
            data = params["content"].encode("utf-8")
            if self.files is not None:
                self.files[path] = data
            else:
                Path(path).write_bytes(data)
            return None
        raise AssertionError(f"unexpected request {method}")


def careless(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def client_services(conn: FakeClientConnection) -> AcpClientServices:
    caps = {"fs": {"readTextFile": True, "writeTextFile": True}}
    return AcpClientServices(cast(Connection, conn), "sess-1", caps, LocalServices())


@asynccontextmanager
async def context(root: Path, via: str) -> AsyncIterator[ToolContext]:
    if via == "local":
        yield ToolContext(cwd=root, roots=(root,), services=LocalServices())
    else:
        yield ToolContext(cwd=root, roots=(root,), services=client_services(FakeClientConnection(careless)))


VIA = pytest.mark.parametrize("via", ["local", "client"])


async def call(tool: Tool, args: Mapping[str, JSON], ctx: ToolContext) -> tuple[list[JSON], ToolOutcome]:
    """What the runner does: plan (its preview is the permission diff), then run. A
    ToolError from either is the failed result the model sees."""
    preview: list[JSON] = []
    try:
        preview = (await tool.plan(args, ctx)).preview
        return preview, await tool.run(args, ctx)
    except ToolError as e:
        return preview, ToolOutcome.failure(e)


def text_of(outcome: ToolOutcome) -> str:
    return "".join(block["text"] for block in outcome.content)


def refusal(outcome: ToolOutcome) -> tuple[str | None, str]:
    assert outcome.is_error, text_of(outcome)
    return (outcome.error or {}).get("code"), text_of(outcome)


# -- edit_file -------------------------------------------------------------------------

EDITS = [
    # (case, bytes before, old_text, new_text, bytes after or None for a refusal)
    ("latin1", LATIN1, "= 1", "= 2", None),
    ("binary", BINARY, "= 1", "= 2", None),
    ("bom", BOM, "y = 2", "y = 3", b"\xef\xbb\xbfx = 1\ny = 3\n"),
    ("crlf", CRLF, "x = 1", "x = 2", b"one\r\nx = 2\r\nthree\r\n"),
    ("crlf_lf_old_text", CRLF, "one\nx = 1", "1\nx = 2", b"1\r\nx = 2\r\nthree\r\n"),
    ("crlf_new_lines", CRLF, "x = 1", "x = 2\ny = 3", b"one\r\nx = 2\r\ny = 3\r\nthree\r\n"),
    ("real_fffd", REAL_FFFD, "x = 1", "x = 2", "x = 2  # \ufffd stays\n".encode()),
    ("empty", b"", "x", "y", None),
]
REFUSALS = {  # (code, message), PATH standing for the file's path
    "latin1": ("not_utf8", f"PATH is not UTF-8 text ({len(LATIN1)} bytes); refusing to edit it"),
    "binary": ("binary_file", f"PATH is a binary file ({len(BINARY)} bytes); refusing to edit it"),
    "empty": ("no_match", "old_text was not found in PATH. Read the file again and copy the "
              "text exactly, including whitespace and indentation."),
}


@VIA
@pytest.mark.parametrize(("case", "before", "old_text", "new_text", "after"), EDITS,
                         ids=[e[0] for e in EDITS])
async def test_edit_changes_only_the_edited_bytes_or_refuses(
    root: Path, via: str, case: str, before: bytes, old_text: str, new_text: str, after: bytes | None
) -> None:
    f = root / "file"
    f.write_bytes(before)
    async with context(root, via) as ctx:
        args = {"path": "file", "old_text": old_text, "new_text": new_text}
        preview, outcome = await call(EditFile(), args, ctx)
    if after is None:
        code, message = REFUSALS[case]
        assert refusal(outcome) == (code, message.replace("PATH", str(f)))
        assert preview == []  # refused before anyone is asked: no diff shown
        assert f.read_bytes() == before
        return
    assert not outcome.is_error, text_of(outcome)
    assert f.read_bytes() == after
    # The diff asked about is exactly the file before and after, byte for byte.
    diff = {"type": "diff", "path": str(f), "oldText": before.decode(), "newText": after.decode()}
    assert preview == [diff] and outcome.display == [diff]


# -- write_file ------------------------------------------------------------------------

WRITES = [
    ("latin1", LATIN1, None),
    ("binary", BINARY, None),
    ("bom", BOM, BOM.decode()),
    ("empty", b"", ""),
    ("real_fffd", REAL_FFFD, REAL_FFFD.decode()),
]
WRITE_REFUSALS = {
    "latin1": ("not_utf8", f"is not UTF-8 text ({len(LATIN1)} bytes); refusing to overwrite it"),
    "binary": ("binary_file", f"is a binary file ({len(BINARY)} bytes); refusing to overwrite it"),
}


@VIA
@pytest.mark.parametrize(("case", "before", "old_shown"), WRITES, ids=[w[0] for w in WRITES])
async def test_write_over_a_file_shows_it_exactly_or_refuses(
    root: Path, via: str, case: str, before: bytes, old_shown: str | None
) -> None:
    f = root / "file"
    f.write_bytes(before)
    async with context(root, via) as ctx:
        preview, outcome = await call(WriteFile(), {"path": "file", "content": "new \u00e9\r\n"}, ctx)
    if old_shown is None:
        code, message = WRITE_REFUSALS[case]
        assert refusal(outcome) == (code, f"{f} {message}")
        assert preview == [] and f.read_bytes() == before
        return
    assert not outcome.is_error, text_of(outcome)
    assert f.read_bytes() == "new \u00e9\r\n".encode()
    assert preview == [{"type": "diff", "path": str(f), "oldText": old_shown, "newText": "new \u00e9\r\n"}]


# -- read_file -------------------------------------------------------------------------


@VIA
async def test_read_of_a_binary_or_latin1_file_says_so(root: Path, via: str) -> None:
    noise = random.Random(13).randbytes(30_000)
    (root / "noise.bin").write_bytes(noise)
    (root / "latin1.txt").write_bytes(LATIN1)
    (root / "bom.txt").write_bytes(BOM)
    (root / "fffd.txt").write_bytes(REAL_FFFD)
    (root / "empty.txt").write_bytes(b"")
    async with context(root, via) as ctx:
        whole = (await call(ReadFile(), {"path": "noise.bin"}, ctx))[1]
        part = (await call(ReadFile(), {"path": "noise.bin", "line": 2, "limit": 3}, ctx))[1]
        latin1 = (await call(ReadFile(), {"path": "latin1.txt"}, ctx))[1]
        bom = (await call(ReadFile(), {"path": "bom.txt"}, ctx))[1]
        fffd = (await call(ReadFile(), {"path": "fffd.txt"}, ctx))[1]
        empty = (await call(ReadFile(), {"path": "empty.txt"}, ctx))[1]
    assert refusal(whole) == ("binary_file", f"{root / 'noise.bin'} is a binary file (30000 bytes); not shown")
    assert refusal(part) == refusal(whole)
    assert refusal(latin1) == ("not_utf8", f"{root / 'latin1.txt'} is not UTF-8 text ({len(LATIN1)} bytes); not shown")
    assert text_of(bom) == BOM.decode() and text_of(fffd) == REAL_FFFD.decode()
    assert not empty.is_error and text_of(empty) == ""


async def test_local_read_text_keeps_bytes_and_refuses_what_is_not_utf8(tmp_path: Path) -> None:
    # read_text also serves `acp-bridge chat`'s fs/read_text_file to the agent.
    f = tmp_path / "f"
    f.write_bytes(b"a\r\nb\xe9\nc\r\n")
    assert read_text(f, 1, 1) == "a\r\n"
    assert read_text(f, 3, None) == "c\r\n"
    with pytest.raises(ToolError) as e:
        read_text(f, 2, 1)
    assert e.value.code == "not_utf8"
    f.write_bytes(b"text\n" + b"\0" * 10)
    with pytest.raises(ToolError) as e:
        read_text(f, 1, 1)  # the NUL is not in the line read: a binary file all the same
    assert e.value.code == "binary_file" and "(15 bytes)" in e.value.message


# -- through a client whose copy cannot be checked here -----------------------------------


async def test_client_text_with_replacement_characters_is_not_written_back(root: Path) -> None:
    # The client's files are not on this machine, so nothing here can tell its U+FFFD
    # from a real one: refused, and no fs/write_text_file is sent.
    path = str(root / "remote.txt")
    conn = FakeClientConnection(careless, files={path: LATIN1})
    ctx = ToolContext(cwd=root, roots=(root,), services=client_services(conn))
    root.joinpath("remote.txt").write_bytes(b"")  # confinement wants the path to exist here
    preview, outcome = await call(EditFile(), {"path": "remote.txt", "old_text": "= 1", "new_text": "= 2"}, ctx)
    code, message = refusal(outcome)
    assert code == "not_utf8" and message == (
        f"{path} is not UTF-8 text (the client's copy has U+FFFD replacement characters); refusing to edit it"
    )
    assert preview == [] and conn.writes == [] and conn.files == {path: LATIN1}


# -- what is shown is what is written ------------------------------------------------------


@VIA
async def test_a_file_changed_after_the_diff_was_shown_is_not_written(root: Path, via: str) -> None:
    f = root / "app.py"
    f.write_bytes(b"a = 1\nb = 2\n")
    async with context(root, via) as ctx:
        edit = {"path": "app.py", "old_text": "b = 2", "new_text": "b = 3"}
        plan = await EditFile().plan(edit, ctx)
        assert plan.preview[0]["newText"] == "a = 1\nb = 3\n"
        f.write_bytes(b"a = 100\nb = 2\n")  # someone else, while the person reads the diff
        with pytest.raises(ToolError) as e:
            await EditFile().run(edit, ctx)
        assert e.value.code == "file_changed" and "nothing was written" in e.value.message
        assert f.read_bytes() == b"a = 100\nb = 2\n"

        write = {"path": "new.txt", "content": "mine\n"}
        plan = await WriteFile().plan(write, ctx)
        assert plan.preview[0]["oldText"] is None  # shown as a creation
        (root / "new.txt").write_bytes(b"theirs\n")
        with pytest.raises(ToolError) as e:
            await WriteFile().run(write, ctx)
        assert e.value.code == "file_changed"
        assert (root / "new.txt").read_bytes() == b"theirs\n"

        # Unchanged since the diff: written as shown.
        plan = await EditFile().plan(edit, ctx)
        await EditFile().run(edit, ctx)
    assert f.read_bytes() == plan.preview[0]["newText"].encode() == b"a = 100\nb = 3\n"


async def test_a_failed_local_write_is_a_tool_error_and_changes_nothing(root: Path) -> None:
    class FullDisk(LocalServices):
        async def write_text_file(self, path: Path, content: str) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    f = root / "a.txt"
    f.write_bytes(b"a\n")
    ctx = ToolContext(cwd=root, roots=(root,), services=FullDisk())
    _, outcome = await call(EditFile(), {"path": "a.txt", "old_text": "a", "new_text": "b"}, ctx)
    assert refusal(outcome) == ("io_error", f"cannot write {f}: No space left on device; it was not changed")
    assert f.read_bytes() == b"a\n"


# -- the atomic replacement --------------------------------------------------------------


def test_write_text_keeps_mode_owner_and_symlinks(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_bytes(b"#!/bin/sh\necho old\n")
    script.chmod(0o755)
    link = tmp_path / "link.sh"
    link.symlink_to("run.sh")
    if os.getuid() == 0:  # only root can hand a file to someone else
        os.chown(script, 4321, 4321)
    write_text(link, "#!/bin/sh\necho new\n")
    assert link.is_symlink() and os.readlink(link) == "run.sh"
    assert script.read_bytes() == b"#!/bin/sh\necho new\n"
    st = script.stat()
    assert stat.S_IMODE(st.st_mode) == 0o755
    if os.getuid() == 0:
        assert (st.st_uid, st.st_gid) == (4321, 4321)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.sh", "run.sh"]


def test_write_text_handles_the_longest_file_names(tmp_path: Path) -> None:
    # The temporary file beside it must fit in NAME_MAX too.
    f = tmp_path / ("n" * 255)
    f.write_bytes(b"old")
    write_text(f, "new")
    assert f.read_bytes() == b"new" and sorted(tmp_path.iterdir()) == [f]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


# -- a whole turn: what the person is asked about ------------------------------------------


def run_turn(work: Path, calls: list[dict[str, Any]], answer: Callable[[PermissionRequest], Any]) -> list[Event]:
    """One turn of a scripted model making `calls`, in `ask` mode, over a real JSONL
    store and the local files; `answer` is the person at the permission prompt."""
    store = SessionStore(JsonlBackend(work.parent / "store"))
    log = store.create(cwd=str(work))
    model = ScriptModel([{"toolCalls": calls}, {"text": "done"}])

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            services = ScriptedClient(task_group=tg, permission_answer=answer)
            await TurnRunner(log, model, services, mode="ask").prompt([{"type": "text", "text": "go"}])
            tg.cancel_scope.cancel()

    anyio.run(main)
    events = list(log.events)
    log.close()
    return events


def results(events: list[Event]) -> dict[str, tuple[bool, str | None]]:
    return {e["data"]["callId"]: (e["data"]["isError"], e["data"].get("error", {}).get("code"))
            for e in events if e["type"] == "tool/result"}


def test_no_permission_is_asked_for_an_edit_that_would_damage_the_file(root: Path) -> None:
    (root / "latin1.txt").write_bytes(LATIN1)
    asked: list[PermissionRequest] = []

    def allow(request: PermissionRequest) -> PermissionOutcome:
        asked.append(request)
        return PermissionOutcome("selected", "allow_once")

    events = run_turn(root, [
        {"id": "e1", "name": "edit_file", "arguments": {"path": "latin1.txt", "old_text": "= 1", "new_text": "= 2"}},
        {"id": "w1", "name": "write_file", "arguments": {"path": "latin1.txt", "content": "caf\u00e9 = 2\n"}},
    ], allow)
    assert asked == []  # nothing was shown that could be approved
    assert results(events) == {"e1": (True, "not_utf8"), "w1": (True, "not_utf8")}
    assert (root / "latin1.txt").read_bytes() == LATIN1


def test_an_approved_diff_is_written_exactly_or_not_at_all(root: Path) -> None:
    f = root / "app.py"
    f.write_bytes(b"a = 1\nb = 2\n")
    asked: list[PermissionRequest] = []

    def change_then_allow(request: PermissionRequest) -> PermissionOutcome:
        asked.append(request)
        if request.call_id == "e1":  # someone saves the file while the person reads the diff
            f.write_bytes(b"a = 100\nb = 2\n")
        return PermissionOutcome("selected", "allow_once")

    edit = {"path": "app.py", "old_text": "b = 2", "new_text": "b = 3"}
    events = run_turn(root, [{"id": "e1", "name": "edit_file", "arguments": edit},
                             {"id": "e2", "name": "edit_file", "arguments": edit}], change_then_allow)
    shown = [request.content[0] for request in asked]
    assert [(d["oldText"], d["newText"]) for d in shown] == [
        ("a = 1\nb = 2\n", "a = 1\nb = 3\n"),  # approved, but no longer what is on disk
        ("a = 100\nb = 2\n", "a = 100\nb = 3\n"),  # approved and written as shown
    ]
    assert results(events) == {"e1": (True, "file_changed"), "e2": (False, None)}
    assert f.read_bytes() == shown[1]["newText"].encode()
