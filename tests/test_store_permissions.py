"""Stores keep their owner's permissions: only what the agent creates is 0700/0600, an
existing store folder (and its existing subfolders) keeps its mode, and a store the
agent cannot write is one line on stderr and a non-zero exit of `acp-bridge serve`,
never a chmod."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from session.files import private_dir
from tests.support.acp_client import CLIENT_CAPS_NONE, AgentProcess

SERVE = [sys.executable, "-m", "acp_bridge", "serve"]
# As root, a folder's mode does not stop writes (CAP_DAC_OVERRIDE): the "cannot write"
# cases run the agent without that capability, as any other user would be.
NO_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
          "--bounding-set=-dac_override,-dac_read_search"]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def as_unprivileged() -> list[str]:
    """The prefix that runs a command without root's override of folder modes."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: root writes into a 0500 folder anyway")
    probe = subprocess.run([*NO_DAC, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop capabilities here: {probe.stderr.decode().strip()}")
    return NO_DAC


def serve(store: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    return subprocess.run([*(prefix or []), *SERVE, "--store", str(store)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=30, env=env)


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("existing", [0o500, 0o2775, 0o700, 0o755], ids=oct)
def test_private_dir_leaves_an_existing_folder_as_it_is(tmp_path: Path, existing: int) -> None:
    store = tmp_path / "store"
    store.mkdir()
    os.chmod(store, existing)
    assert mode(store) == existing
    private_dir(store)
    assert mode(store) == existing


def test_private_dir_makes_what_is_missing_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)  # would leave 0500 without the chmod of a folder we made
    try:
        private_dir(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert mode(folder) == 0o700, folder


def test_private_dir_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "store").write_text("not a folder")
    with pytest.raises(FileExistsError):
        private_dir(tmp_path / "store")


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize("existing", [0o500, 0o2775, 0o700], ids=oct)
@pytest.mark.integration
async def test_the_agent_keeps_the_store_mode_and_makes_its_own_things_private(
    tmp_path: Path, backend: str, existing: int, umask_022: None
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    os.chmod(store, existing)
    (store / "locks").mkdir()  # an existing subfolder keeps its mode too
    os.chmod(store / "locks", 0o750)
    if not os.access(store, os.W_OK | os.X_OK):
        pytest.skip("this user cannot write a 0500 folder: see the start-up error tests")
    async with AgentProcess(store, backend=backend) as agent:
        await agent.initialize(CLIENT_CAPS_NONE)
        sid = await agent.new_session(tmp_path)
        await agent.prompt(sid, "hello")
    assert agent.returncode == 0
    assert mode(store) == existing  # a session was stored, and the folder kept its mode
    assert mode(store / "locks") == 0o750
    assert mode(store / "locks" / f"{sid}.lock") == 0o600
    if backend == "jsonl":
        assert mode(store / "sessions") == 0o700  # made by the agent, so private
        assert mode(store / "sessions" / f"{sid}.jsonl") == 0o600
    else:
        assert mode(store / "sessions.sqlite3") == 0o600


@pytest.mark.integration
def test_serve_refuses_a_store_it_cannot_write(tmp_path: Path) -> None:
    prefix = as_unprivileged()
    store = tmp_path / "store"
    store.mkdir()
    os.chmod(store, 0o500)
    os.chmod(tmp_path, 0o755)  # reachable: the store itself is what is not writable
    result = serve(store, prefix)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"acp-bridge: --store: store {store} is not writable: Permission denied"]
    assert result.stdout == ""
    assert mode(store) == 0o500
    assert list(store.iterdir()) == []


@pytest.mark.integration
def test_serve_refuses_an_existing_subfolder_it_cannot_write(tmp_path: Path) -> None:
    prefix = as_unprivileged()
    store = tmp_path / "store"
    (store / "sessions").mkdir(parents=True)
    os.chmod(store / "sessions", 0o500)
    result = serve(store, prefix)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"acp-bridge: --store: store {store / 'sessions'} is not writable: Permission denied"]
    assert mode(store / "sessions") == 0o500


@pytest.mark.integration
def test_serve_refuses_a_store_it_cannot_create(tmp_path: Path) -> None:
    prefix = as_unprivileged()
    parent = tmp_path / "parent"
    parent.mkdir()
    os.chmod(parent, 0o500)
    result = serve(parent / "a" / "store", prefix)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"acp-bridge: --store: cannot create the store {parent / 'a' / 'store'}: {parent} is not writable: "
        "Permission denied"]
    assert list(parent.iterdir()) == []


@pytest.mark.integration
def test_serve_refuses_a_store_that_is_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "store").write_text("x")
    result = serve(tmp_path / "store")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"acp-bridge: --store: store {tmp_path / 'store'} is not a folder"]


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A read-only tmpfs (root only): even root cannot write there."""
    mount_point = tmp_path / "ro"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a read-only tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,mode=0755,size=64k", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


@pytest.mark.integration
def test_serve_refuses_a_store_on_a_read_only_file_system(read_only_mount: Path) -> None:
    result = serve(read_only_mount)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"acp-bridge: --store: store {read_only_mount} is not writable: Read-only file system"]
    assert mode(read_only_mount) == 0o755
    inner = serve(read_only_mount / "store")
    assert inner.returncode == 2
    assert inner.stderr.splitlines() == [
        f"acp-bridge: --store: cannot create the store {read_only_mount / 'store'}: {read_only_mount} is not "
        "writable: Read-only file system"]


@pytest.mark.integration
def test_serve_starts_on_a_writable_store_with_its_one_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    os.chmod(store, 0o2775)
    result = serve(store)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0].endswith(f": store {store} (jsonl), model echo")
    assert mode(store) == 0o2775


@pytest.mark.integration
def test_sessions_refuses_a_store_it_cannot_read(tmp_path: Path) -> None:
    prefix = as_unprivileged()
    store = tmp_path / "store"
    (store / "sessions").mkdir(parents=True)
    os.chmod(store, 0o300)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    result = subprocess.run([*prefix, sys.executable, "-m", "acp_bridge", "sessions", "list", "--store", str(store)],
                            capture_output=True, text=True, timeout=30, env=env)
    os.chmod(store, 0o700)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"acp-bridge sessions: --store: store {store} is not readable: Permission denied"]


@pytest.mark.integration
def test_serve_refuses_a_log_file_it_cannot_create(tmp_path: Path) -> None:
    prefix = as_unprivileged()
    logs = tmp_path / "logs"
    logs.mkdir()
    os.chmod(logs, 0o500)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    result = subprocess.run([*prefix, *SERVE, "--store", str(tmp_path / "store"), "--log-file", str(logs / "a.log")],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, env=env)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"acp-bridge: --log-file: cannot create {logs / 'a.log'}: {logs} is not writable: Permission denied"]
    assert not (tmp_path / "store").exists()
