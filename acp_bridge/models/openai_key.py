"""The key of `openai:` models: where it comes from, where `acp-bridge login` keeps it,
and asking the provider whether it takes it.

The key is `OPENAI_API_KEY` when set, else the key file (`$XDG_CONFIG_HOME/acp-bridge/
openai-api-key`, `~/.config/...` by default; folder 0700, file 0600, written atomically).
Nothing here logs or formats a key: messages name the variable or the file, never the
value. httpx is imported only by `check_key`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from session.files import private_dir

KEY_ENV: Final = "OPENAI_API_KEY"
KEY_FILE_NAME: Final = "openai-api-key"
MAX_KEY_LENGTH: Final = 4096


def key_file(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "acp-bridge" / KEY_FILE_NAME


def find_key(env: Mapping[str, str] | None = None) -> str | None:
    """The key to use, or None: the variable, else the key file (its first line)."""
    env = os.environ if env is None else env
    value = env.get(KEY_ENV, "").strip()
    if value:
        return value
    try:
        text = key_file(env).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    return first or None


def key_problem(key: str) -> str | None:
    """Why `key` cannot be a key (it goes into an HTTP header), or None."""
    if not key:
        return "the key is empty"
    if len(key) > MAX_KEY_LENGTH:
        return f"the key is longer than {MAX_KEY_LENGTH} characters"
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        return "the key holds spaces or characters an HTTP header cannot carry"
    return None


def save_key(key: str, env: Mapping[str, str] | None = None) -> Path:
    """Write `key` to the key file (0600, atomically: a temporary file renamed into
    place) and return its path."""
    path = key_file(env)
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, key.encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return path


def forget_key(env: MutableMapping[str, str] | None = None) -> Path | None:
    """`logout`: remove the key file (the path, if there was one) and `OPENAI_API_KEY`
    from `env` (this process's environment by default), so that no later request of
    this process finds a key. OSError if the file cannot be removed."""
    target = os.environ if env is None else env
    path = key_file(target)
    target.pop(KEY_ENV, None)
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    return path


@dataclass(frozen=True)
class KeyCheck:
    ok: bool
    message: str


async def check_key(base_url: str, key: str, *, timeout: float = 15.0) -> KeyCheck:
    """Ask the provider whether it takes `key`: `GET {base_url}/models`. Refused only
    on 401 or 403; a server without that route, or one that cannot be reached, does
    not prove the key wrong (the first prompt will say what is wrong then)."""
    import httpx

    problem = key_problem(key)
    if problem is not None:
        return KeyCheck(False, problem)
    url = base_url.rstrip("/") + "/models"
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.get(url, headers={"Authorization": f"Bearer {key}"})
    except httpx.HTTPError as exc:
        return KeyCheck(True, f"could not check the key at {url} ({type(exc).__name__}); kept it")
    if response.status_code in (401, 403):
        return KeyCheck(False, f"{url} refused the key ({response.status_code} {response.reason_phrase})")
    return KeyCheck(True, f"{url} answered {response.status_code}")
