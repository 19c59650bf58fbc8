"""The store is found or named (issue 36, point 3; docs/cli.md, "The store"): a named
store that does not exist is an error naming it, the backend of an existing store is
recognised from what is in it (an explicit `--backend` that disagrees is an error saying
what was found, for `sessions` and for the agent), and a folder that holds no store says
where the store inside it is."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from pathlib import Path

import pytest

from acp_bridge.cli import main as cli
from acp_bridge.cli.startup import agent_settings
from acp_bridge.cli.stores import found_backend
from acp_bridge.errors import ConfigError
from session import SessionStore, open_backend
from tests.support.logs import Script, write


def make_store(root: Path, backend: str) -> str:
    store = SessionStore(open_backend(backend, root))
    log = store.create(cwd="/w")
    write(log, Script().text_turn("where is my store", "here"))
    log.close()
    store.close()
    return log.id


def run_cli(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = dict(os.environ)
    os.environ.pop("ACP_BRIDGE_BACKEND", None)
    os.environ.pop("ACP_BRIDGE_HOME", None)
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
    finally:
        os.environ.clear()
        os.environ.update(old)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_the_backend_is_recognised_from_the_store(tmp_path: Path, backend: str) -> None:
    sid = make_store(tmp_path / "store", backend)
    assert found_backend(tmp_path / "store") == backend
    code, out, err = run_cli("sessions", "list", "--store", str(tmp_path / "store"))
    assert code == 0, err
    assert sid in out and "where is my store" in out
    code, out, err = run_cli("sessions", "show", sid[:8], "--store", str(tmp_path / "store"))
    assert code == 0 and "where is my store" in out


def test_an_explicit_backend_that_disagrees_says_what_was_found(tmp_path: Path) -> None:
    make_store(tmp_path / "store", "sqlite")
    code, out, err = run_cli("sessions", "--backend", "jsonl", "list", "--store", str(tmp_path / "store"))
    assert (code, out) == (2, "")
    assert err.strip() == (f"acp-bridge sessions: --backend: {tmp_path / 'store'} holds an SQLite store "
                           f"(sessions.sqlite3), not a jsonl one: give --backend sqlite, or another --store")
    code, _, err = run_cli("sessions", "list", "--store", str(tmp_path / "store"),
                           env={"ACP_BRIDGE_BACKEND": "jsonl"})
    assert code == 2 and err.startswith("acp-bridge sessions: $ACP_BRIDGE_BACKEND: ")


def test_the_agent_recognises_the_store_too(tmp_path: Path) -> None:
    """`serve --store S` of an SQLite store without --backend writes to it, not a JSONL
    store beside it; with a --backend that disagrees it does not start."""
    make_store(tmp_path / "store", "sqlite")
    args = argparse.Namespace(store=str(tmp_path / "store"), backend=None, model=None, log_level=None,
                              log_file=None, max_steps=None, prices=None)
    assert agent_settings(args).backend == "sqlite"
    with pytest.raises(ConfigError, match="holds an SQLite store"):
        agent_settings(argparse.Namespace(**{**vars(args), "backend": "jsonl"}))


def test_a_named_store_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    code, out, err = run_cli("sessions", "list", "--store", str(missing))
    assert (code, out) == (2, "")
    assert err.strip() == f"acp-bridge sessions: --store: no store at {missing}: the folder does not exist"
    code, _, err = run_cli("sessions", "list", env={"ACP_BRIDGE_HOME": str(missing)})
    assert code == 2 and "$ACP_BRIDGE_HOME: no store at" in err
    assert not missing.exists()


def test_the_default_store_not_made_yet_is_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody named it (nor $XDG_STATE_HOME's folder, set by desktops, not by people for
    us): nothing was recorded yet."""
    for env in ({"XDG_STATE_HOME": str(tmp_path / "state")}, {"HOME": str(tmp_path / "home")}):
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
        code, out, err = run_cli("sessions", "list", env=env)
        assert (code, err) == (0, "")
        assert out.startswith("No sessions in ") and "acp-bridge (jsonl backend)" in out
    assert not (tmp_path / "state").exists() and not (tmp_path / "home").exists()


def test_the_demo_folder_points_at_its_store(tmp_path: Path) -> None:
    make_store(tmp_path / "demo" / "store", "jsonl")
    (tmp_path / "demo" / "model-1.json").write_text("{}")
    code, _, err = run_cli("sessions", "list", "--store", str(tmp_path / "demo"))
    assert code == 2
    assert err.strip().endswith(f"holds no session store (no sessions/ folder, no sessions.sqlite3); "
                                f"{tmp_path / 'demo' / 'store'} is one: give --store {tmp_path / 'demo' / 'store'}")


def test_an_empty_folder_is_an_empty_store(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, out, _ = run_cli("sessions", "list", "--store", str(tmp_path / "empty"))
    assert (code, out) == (0, f"No sessions in {tmp_path / 'empty'} (jsonl backend).\n")
