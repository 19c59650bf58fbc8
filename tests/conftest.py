from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from session import Backend, SessionStore, open_backend

BACKEND_KINDS = ("memory", "jsonl", "sqlite")


@pytest.fixture(params=BACKEND_KINDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def backend(backend_kind: str, store_dir: Path) -> Iterator[Backend]:
    b = open_backend(backend_kind, store_dir)
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> SessionStore:
    return SessionStore(backend)
