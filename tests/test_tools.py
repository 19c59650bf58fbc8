"""The five tools against a temporary directory, through LocalServices (and a fake
client terminal for the ACP terminal path): results, diffs, errors, confinement,
timeouts, cancellation and output caps."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.errors import ToolError
from acp_bridge.tools import ALL_TOOLS, get_tool, tool_specs
from acp_bridge.tools.base import JSON, ExitStatus, TerminalOutput, Tool, ToolContext, ToolOutcome
from acp_bridge.tools.command import RunCommand
from acp_bridge.tools.files import MAX_DIR_ENTRIES, EditFile, ListDir, ReadFile, WriteFile
from acp_bridge.tools.local import LocalServices

pytestmark = pytest.mark.anyio


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    o = tmp_path / "outside"
    o.mkdir()
    (o / "secret.txt").write_text("secret\n")
    return o


@asynccontextmanager
async def local_ctx(root: Path, *extra: Path, **kw: Any) -> AsyncIterator[ToolContext]:
    async with anyio.create_task_group() as tg:
        yield ToolContext(
            cwd=root, roots=(root, *extra), services=LocalServices(task_group=tg, **kw)
        )


async def call(tool: Tool, args: Mapping[str, JSON], ctx: ToolContext) -> ToolOutcome:
    """What the runner does: plan (errors become failures), then run."""
    try:
        await tool.plan(args, ctx)
        return await tool.run(args, ctx)
    except ToolError as e:
        return ToolOutcome.failure(e)


def text_of(outcome: ToolOutcome) -> str:
    return "".join(block["text"] for block in outcome.content)


def code_of(outcome: ToolOutcome) -> str | None:
    assert outcome.is_error, text_of(outcome)
    return outcome.error["code"] if outcome.error else None


def alive(pid: int) -> bool:
    # PID 1 in a container may never reap orphans: a zombie counts as gone.
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


async def wait_gone(pid: int, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await anyio.sleep(0.02)
    return True


# -- read_file ---------------------------------------------------------------------


async def test_read_whole_file_and_line_limit(root: Path) -> None:
    (root / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    async with local_ctx(root) as ctx:
        assert text_of(await call(ReadFile(), {"path": "a.txt"}, ctx)).startswith(
            "line 1\nline 2\n"
        )
        part = await call(ReadFile(), {"path": "a.txt", "line": 3, "limit": 2}, ctx)
        assert text_of(part) == "line 3\nline 4\n"
        tail = await call(ReadFile(), {"path": str(root / "a.txt"), "line": 10}, ctx)
        assert text_of(tail) == "line 10\n"
        past = await call(ReadFile(), {"path": "a.txt", "line": 99}, ctx)
        assert not past.is_error and "shorter" in text_of(past)
        plan = await ReadFile().plan({"path": "a.txt", "line": 3}, ctx)
        assert plan.title == "Read a.txt" and plan.kind == "read"
        assert plan.locations == [{"path": str(root / "a.txt"), "line": 3}]


async def test_read_caps_at_256_kib_with_a_note(root: Path) -> None:
    (root / "big.txt").write_text(("x" * 99 + "\n") * 5000)  # 500 KB
    async with local_ctx(root) as ctx:
        text = text_of(await call(ReadFile(), {"path": "big.txt"}, ctx))
    head, note = text.rsplit("[truncated: ", 1)
    assert len(head.encode()) <= 256 * 1024
    assert head.endswith("x\n")  # cut at a line end
    rest = 500_000 - len(head.encode())
    next_line = head.count("\n") + 1
    assert note == f"{rest} more bytes; use line/limit (e.g. line={next_line}) to read on]"


async def test_read_errors(root: Path) -> None:
    (root / "d").mkdir()
    async with local_ctx(root) as ctx:
        assert code_of(await call(ReadFile(), {"path": "missing.txt"}, ctx)) == "not_found"
        assert code_of(await call(ReadFile(), {"path": "d"}, ctx)) == "not_a_file"
        assert code_of(await call(ReadFile(), {}, ctx)) == "invalid_arguments"
        bad = await call(ReadFile(), {"path": "x", "line": "3"}, ctx)
        assert code_of(bad) == "invalid_arguments" and "'line'" in text_of(bad)
        assert (
            code_of(await call(ReadFile(), {"path": "x", "line": True}, ctx)) == "invalid_arguments"
        )
        assert code_of(await call(ReadFile(), {"path": "x", "line": 0}, ctx)) == "invalid_arguments"
        assert (
            code_of(await call(ReadFile(), {"path": "x", "bogus": 1}, ctx)) == "invalid_arguments"
        )
        assert code_of(await call(ReadFile(), {"path": 7}, ctx)) == "invalid_arguments"


# -- write_file / edit_file ------------------------------------------------------------


async def test_write_new_file_shows_a_creation_diff(root: Path) -> None:
    async with local_ctx(root) as ctx:
        args = {"path": "notes.md", "content": "hello\n"}
        plan = await WriteFile().plan(args, ctx)
        diff = {
            "type": "diff",
            "path": str(root / "notes.md"),
            "oldText": None,
            "newText": "hello\n",
        }
        assert plan.title == "Write notes.md" and plan.kind == "edit"
        assert plan.preview == [diff] and plan.locations == [{"path": str(root / "notes.md")}]
        assert not (root / "notes.md").exists()  # plan changes nothing
        outcome = await WriteFile().run(args, ctx)
    assert not outcome.is_error and outcome.display == [diff]
    assert (root / "notes.md").read_text() == "hello\n"


async def test_write_existing_file_keeps_mode_and_shows_old_text(root: Path) -> None:
    f = root / "run.sh"
    f.write_text("old\n")
    f.chmod(0o750)
    async with local_ctx(root) as ctx:
        outcome = await call(WriteFile(), {"path": "run.sh", "content": "new\n"}, ctx)
    assert outcome.display == [
        {"type": "diff", "path": str(f), "oldText": "old\n", "newText": "new\n"}
    ]
    assert f.read_text() == "new\n" and stat.S_IMODE(f.stat().st_mode) == 0o750
    assert sorted(p.name for p in root.iterdir()) == ["run.sh"]  # no temp file left


async def test_write_needs_an_existing_parent(root: Path) -> None:
    async with local_ctx(root) as ctx:
        outcome = await call(WriteFile(), {"path": "no/such/dir.txt", "content": ""}, ctx)
    assert code_of(outcome) == "not_found" and "parent directory" in text_of(outcome)


async def test_edit_replaces_exactly_one_occurrence(root: Path) -> None:
    f = root / "app.py"
    f.write_text("a = 1\nb = 2\n")
    async with local_ctx(root) as ctx:
        args = {"path": "app.py", "old_text": "b = 2", "new_text": "b = 3"}
        plan = await EditFile().plan(args, ctx)
        assert plan.title == "Edit app.py" and plan.locations == [{"path": str(f), "line": 2}]
        outcome = await EditFile().run(args, ctx)
    diff = {
        "type": "diff",
        "path": str(f),
        "oldText": "a = 1\nb = 2\n",
        "newText": "a = 1\nb = 3\n",
    }
    assert plan.preview == [diff] and outcome.display == [diff]
    assert f.read_text() == "a = 1\nb = 3\n"


async def test_edit_mismatch_errors(root: Path) -> None:
    f = root / "app.py"
    f.write_text("x = 1\n    y = 2\nx = 1\n")
    async with local_ctx(root) as ctx:
        none = await call(EditFile(), {"path": "app.py", "old_text": "z = 9", "new_text": ""}, ctx)
        assert code_of(none) == "no_match" and "exactly" in text_of(none)
        hint = await call(EditFile(), {"path": "app.py", "old_text": "y = 2 ", "new_text": ""}, ctx)
        assert code_of(hint) == "no_match" and "line 2" in text_of(hint)
        two = await call(
            EditFile(), {"path": "app.py", "old_text": "x = 1", "new_text": "x = 2"}, ctx
        )
        assert code_of(two) == "ambiguous_match" and "2 times" in text_of(two)
        empty = await call(EditFile(), {"path": "app.py", "old_text": "", "new_text": "q"}, ctx)
        assert code_of(empty) == "invalid_arguments"
    assert f.read_text() == "x = 1\n    y = 2\nx = 1\n"


async def test_edit_matches_crlf_files(root: Path) -> None:
    f = root / "win.txt"
    f.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    async with local_ctx(root) as ctx:
        outcome = await call(
            EditFile(), {"path": "win.txt", "old_text": "one\ntwo", "new_text": "1\n2"}, ctx
        )
    assert not outcome.is_error
    assert f.read_bytes() == b"1\r\n2\r\nthree\r\n"


# -- list_dir ------------------------------------------------------------------------


async def test_list_dir_sorted_with_directory_marks(root: Path) -> None:
    (root / "src").mkdir()
    (root / "b.txt").write_text("")
    (root / "a.txt").write_text("")
    (root / "src" / "m.py").write_text("")
    async with local_ctx(root) as ctx:
        assert text_of(await call(ListDir(), {"path": "."}, ctx)) == "a.txt\nb.txt\nsrc/"
        plan = await ListDir().plan({"path": "src"}, ctx)
        assert plan.title == "List src/" and plan.locations == [{"path": str(root / "src")}]
        assert text_of(await call(ListDir(), {"path": "src"}, ctx)) == "m.py"
        assert code_of(await call(ListDir(), {"path": "a.txt"}, ctx)) == "not_a_directory"
        assert code_of(await call(ListDir(), {"path": "nope"}, ctx)) == "not_found"


async def test_list_dir_caps_entries(root: Path) -> None:
    for i in range(MAX_DIR_ENTRIES + 5):
        (root / f"f{i:05}").touch()
    async with local_ctx(root) as ctx:
        lines = text_of(await call(ListDir(), {"path": "."}, ctx)).splitlines()
    assert len(lines) == MAX_DIR_ENTRIES + 1 and lines[-1] == "[... 5 more entries not shown]"


# -- confinement ---------------------------------------------------------------------


async def test_escapes_are_refused(root: Path, outside: Path, tmp_path: Path) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "linkdir").symlink_to(outside)
    (root / "dangling").symlink_to(outside / "new.txt")
    os.mkfifo(root / "fifo")
    before = sorted(p.name for p in tmp_path.iterdir()), sorted(p.name for p in outside.iterdir())
    async with local_ctx(root) as ctx:
        for args in (
            {"path": "../outside/secret.txt"},
            {"path": str(outside / "secret.txt")},
            {"path": "link.txt"},
            {"path": "linkdir/secret.txt"},
            {"path": "/etc/passwd"},
        ):
            outcome = await call(ReadFile(), args, ctx)
            assert code_of(outcome) == "outside_roots", args
            assert str(root) in text_of(outcome)  # names the roots
        for path in ("../outside/new.txt", "link.txt", "linkdir/new.txt", "dangling", "/tmp/x"):
            outcome = await call(WriteFile(), {"path": path, "content": "pwned"}, ctx)
            assert code_of(outcome) == "outside_roots", path
        edit = {"path": "link.txt", "old_text": "secret", "new_text": "pwned"}
        assert code_of(await call(EditFile(), edit, ctx)) == "outside_roots"
        assert code_of(await call(ListDir(), {"path": "linkdir"}, ctx)) == "outside_roots"
        assert code_of(await call(ListDir(), {"path": ".."}, ctx)) == "outside_roots"
        run = {"command": "touch pwned", "cwd": "linkdir"}
        assert code_of(await call(RunCommand(), run, ctx)) == "outside_roots"
        assert code_of(await call(ReadFile(), {"path": "fifo"}, ctx)) == "not_a_file"
        fifo_write = await call(WriteFile(), {"path": "fifo", "content": "x"}, ctx)
        assert code_of(fifo_write) == "not_a_file"
        assert code_of(await call(ReadFile(), {"path": "a\0b"}, ctx)) == "invalid_path"
        assert code_of(await call(ReadFile(), {"path": ""}, ctx)) == "invalid_path"
    assert (outside / "secret.txt").read_text() == "secret\n"
    after = sorted(p.name for p in tmp_path.iterdir()), sorted(p.name for p in outside.iterdir())
    assert after == before


async def test_device_files_are_not_files(root: Path) -> None:
    async with local_ctx(root, Path("/dev")) as ctx:
        assert code_of(await call(ReadFile(), {"path": "/dev/zero"}, ctx)) == "not_a_file"
        write = await call(WriteFile(), {"path": "/dev/null", "content": "x"}, ctx)
        assert code_of(write) == "not_a_file"


async def test_additional_roots_and_inner_symlinks_are_allowed(root: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "lib.txt").write_text("lib\n")
    (root / "to_extra").symlink_to(extra / "lib.txt")
    (root / "real.txt").write_text("real\n")
    (root / "alias.txt").symlink_to("real.txt")
    async with local_ctx(root, extra) as ctx:
        assert text_of(await call(ReadFile(), {"path": str(extra / "lib.txt")}, ctx)) == "lib\n"
        assert text_of(await call(ReadFile(), {"path": "../extra/lib.txt"}, ctx)) == "lib\n"
        assert text_of(await call(ReadFile(), {"path": "to_extra"}, ctx)) == "lib\n"
        w = await call(WriteFile(), {"path": str(extra / "new.txt"), "content": "n"}, ctx)
        assert not w.is_error and (extra / "new.txt").read_text() == "n"
        # Writing through an inner link changes its target and keeps the link.
        a = await call(WriteFile(), {"path": "alias.txt", "content": "via link\n"}, ctx)
        assert a.display[0]["path"] == str(root / "real.txt")
    assert (root / "alias.txt").is_symlink() and (root / "real.txt").read_text() == "via link\n"


# -- run_command ---------------------------------------------------------------------


@pytest.mark.integration
async def test_command_exit_codes_and_stderr(root: Path) -> None:
    async with local_ctx(root) as ctx:
        ok = await call(RunCommand(), {"command": "echo hello; pwd"}, ctx)
        assert not ok.is_error and text_of(ok) == f"hello\n{root}\nexit code 0"
        assert ok.display == [{"type": "content", "content": {"type": "text", "text": text_of(ok)}}]
        bad = await call(RunCommand(), {"command": "echo out; echo err >&2; exit 3"}, ctx)
        assert bad.is_error and bad.error is None
        assert text_of(bad) == "out\nerr\nexit code 3"
        (root / "sub").mkdir()
        sub = await call(RunCommand(), {"command": "pwd", "cwd": "sub"}, ctx)
        assert text_of(sub) == f"{root / 'sub'}\nexit code 0"
        assert code_of(await call(RunCommand(), {"command": " "}, ctx)) == "invalid_arguments"
        too_long = {"command": "true", "timeout_ms": 700_000}
        assert code_of(await call(RunCommand(), too_long, ctx)) == "invalid_arguments"
        plan = await RunCommand().plan({"command": "make test"}, ctx)
        assert plan.title == "Run make test" and plan.kind == "execute"


@pytest.mark.integration
async def test_command_timeout_kills_the_process_group(root: Path) -> None:
    async with local_ctx(root) as ctx:
        start = time.monotonic()
        cmd = "echo started; sleep 5 & echo $! > sleep.pid; wait"
        outcome = await call(RunCommand(), {"command": cmd, "timeout_ms": 300}, ctx)
        elapsed = time.monotonic() - start
    assert elapsed < 1.5
    assert code_of(outcome) == "timeout"
    text = text_of(outcome)
    assert "timed out after 0.3 s" in text and "started" in text
    assert text.endswith("killed by signal SIGKILL")
    assert await wait_gone(int((root / "sleep.pid").read_text()))


@pytest.mark.integration
async def test_cancelling_a_command_kills_it(root: Path) -> None:
    async with local_ctx(root) as ctx:
        with anyio.move_on_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(RunCommand().run, {"command": "sleep 30 & echo $! > p; wait"}, ctx)
                while not (root / "p").exists() or not (root / "p").read_text().strip():
                    await anyio.sleep(0.02)
                tg.cancel_scope.cancel()
        assert await wait_gone(int((root / "p").read_text()))


@pytest.mark.integration
async def test_closing_the_services_task_group_kills_commands(root: Path) -> None:
    # The session goes away without releasing its terminal: the owner task kills it.
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            services = LocalServices(task_group=tg)
            term = await services.create_terminal(
                "sleep 30 & echo $! > p; wait", cwd=root, output_byte_limit=100
            )
            while not (root / "p").exists() or not (root / "p").read_text().strip():
                await anyio.sleep(0.02)
            assert term.pid is not None and alive(term.pid)
            scope.cancel()
    assert term.pid is not None and not alive(term.pid)
    assert await wait_gone(int((root / "p").read_text()))
    assert await term.wait_for_exit() == ExitStatus(None, "SIGKILL")


@pytest.mark.integration
async def test_output_is_capped_for_the_model_not_the_display(root: Path) -> None:
    async with local_ctx(root) as ctx:
        outcome = await call(RunCommand(), {"command": "yes 0123456789 | head -c 100000"}, ctx)
    text = text_of(outcome)
    assert len(text.encode()) <= 16.5 * 1024
    assert "[... " in text and " bytes omitted ...]" in text and text.endswith("exit code 0")
    shown = outcome.display[0]["content"]["text"]
    assert shown.startswith("0123456789\n") and len(shown.encode()) >= 100_000
    assert shown.count("0123456789") == 9091  # 100_000 bytes of "0123456789\n"


@pytest.mark.integration
async def test_local_terminal_keeps_the_tail(root: Path) -> None:
    async with local_ctx(root) as ctx:
        term = await ctx.services.create_terminal(
            "printf 'abc'; printf '\\303\\251%.0s' $(seq 10)", cwd=root, output_byte_limit=9
        )
        status = await term.wait_for_exit()
        out = await term.output()
        await term.release()
    assert status == ExitStatus(0)
    assert out.truncated and out.output == "é" * 4  # 9 bytes, cut to a character boundary
    assert out.exit_status == ExitStatus(0)


# -- through a client terminal (fake) ----------------------------------------------------


class FakeTerminal:
    terminal_id = "term-1"

    def __init__(self, exit_code: int | None) -> None:
        self.exit_code = exit_code
        self.killed = anyio.Event()
        self.released = False

    async def wait_for_exit(self) -> ExitStatus:
        if self.exit_code is not None:
            return ExitStatus(self.exit_code)
        await self.killed.wait()
        return ExitStatus(None, "SIGTERM")

    async def output(self) -> TerminalOutput:
        return TerminalOutput("partial\n", truncated=False)

    async def kill(self) -> None:
        self.killed.set()

    async def release(self) -> None:
        self.released = True


class FakeClient(LocalServices):
    def __init__(self, terminal: FakeTerminal) -> None:
        super().__init__()
        self.terminal = terminal
        self.created: list[tuple[str, Path, int]] = []

    async def create_terminal(  # type: ignore[override]
        self,
        command: str,
        *,
        cwd: Path,
        output_byte_limit: int,
        env: Mapping[str, str] | None = None,
    ) -> FakeTerminal:
        self.created.append((command, cwd, output_byte_limit))
        return self.terminal


async def test_client_terminal_is_embedded_and_released(root: Path) -> None:
    progress: list[list[JSON]] = []

    async def report(content: list[JSON]) -> None:
        progress.append(content)

    client = FakeClient(FakeTerminal(exit_code=0))
    ctx = ToolContext(cwd=root, roots=(root,), services=client, progress=report)
    outcome = await RunCommand().run({"command": "ls"}, ctx)
    embed = {"type": "terminal", "terminalId": "term-1"}
    assert progress == [[embed]] and outcome.display[0] == embed
    assert client.created == [("ls", root, 1024 * 1024)] and client.terminal.released

    slow = FakeClient(FakeTerminal(exit_code=None))
    ctx = ToolContext(cwd=root, roots=(root,), services=slow)
    timed_out = await RunCommand().run({"command": "x", "timeout_ms": 50}, ctx)
    assert code_of(timed_out) == "timeout" and slow.terminal.killed.is_set()
    assert slow.terminal.released and "killed by signal SIGTERM" in text_of(timed_out)

    cancelled = FakeClient(FakeTerminal(exit_code=None))
    ctx = ToolContext(cwd=root, roots=(root,), services=cancelled)
    with anyio.move_on_after(0.05):
        await RunCommand().run({"command": "x"}, ctx)
    assert cancelled.terminal.killed.is_set() and cancelled.terminal.released


# -- registry and services ---------------------------------------------------------------


async def test_registry() -> None:
    names = [spec["name"] for spec in tool_specs()]
    assert names == ["read_file", "write_file", "edit_file", "run_command", "list_dir"]
    for tool, spec in zip(ALL_TOOLS, tool_specs(), strict=True):
        assert get_tool(tool.name) is tool and spec["parameters"]["additionalProperties"] is False
        assert set(spec["parameters"]["required"]) <= set(spec["parameters"]["properties"])
    assert get_tool("rm_rf") is None

