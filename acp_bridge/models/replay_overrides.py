"""The overrides file of a `replay:` recording: a recorded model call replaced by an
error or a hang, without editing the recording (docs/snapshots.md, "Overriding a call").

    {"overrides": [
      {"turn": 2, "step": 1, "error": {"message": "rate limited", "code": "rate_limit", "retryable": true}},
      {"turn": 3, "step": 1, "hang": true, "keepChunks": true}
    ]}

It lives beside a recording file (`NAME.jsonl` -> `NAME.overrides.json`), or where
`$ACP_BRIDGE_REPLAY_OVERRIDES` says (the only way for a recording in the store). Each
entry names a call the recording holds; `keepChunks` streams the recorded thoughts and
text before the error or the hang (default: nothing is streamed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from acp_bridge.errors import ModelSpecError
from acp_bridge.models.recording import CallError, Recording

OVERRIDES_ENV = "ACP_BRIDGE_REPLAY_OVERRIDES"
_FIELDS = frozenset({"turn", "step", "error", "hang", "keepChunks"})


@dataclass(frozen=True)
class Override:
    turn: int
    step: int
    end: CallError | None  # None: hang
    keep_chunks: bool = False


def overrides_path(source: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Where the overrides of `replay:SOURCE` are (the file may not exist), or None."""
    env = os.environ if env is None else env
    if env.get(OVERRIDES_ENV):
        return Path(env[OVERRIDES_ENV])
    path = Path(source)
    if path.suffix == ".jsonl":
        return path.with_name(path.stem + ".overrides.json")
    return None


def load_overrides(recording: Recording, path: Path | None, *, required: bool = False) -> dict[tuple[int, int], Override]:
    """The overrides at `path` for `recording` ({} when there is no file and none is
    required). Raises ModelSpecError for a bad file, naming the entry and what is wrong."""
    if path is None or (not required and not path.exists()):
        return {}
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ModelSpecError(f"replay overrides {path}: cannot read it: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ModelSpecError(f"replay overrides {path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) != {"overrides"} or not isinstance(doc["overrides"], list):
        raise ModelSpecError(f'replay overrides {path}: expected {{"overrides": [...]}}')
    out: dict[tuple[int, int], Override] = {}
    for number, entry in enumerate(doc["overrides"], start=1):
        override = _entry(entry, lambda why, n=number: ModelSpecError(f"replay overrides {path}: entry {n}: {why}"))
        key = (override.turn, override.step)
        if key not in recording.calls:
            raise ModelSpecError(
                f"replay overrides {path}: entry {number} names turn {override.turn} step "
                f"{override.step}, which the recording {recording.source} does not have "
                f"({recording.describe()})")
        if key in out:
            raise ModelSpecError(f"replay overrides {path}: entry {number}: turn {override.turn} "
                                 f"step {override.step} is overridden twice")
        out[key] = override
    return out


def _entry(entry: Any, bad: Any) -> Override:
    if not isinstance(entry, dict):
        raise bad("not an object")
    unknown = set(entry) - _FIELDS
    if unknown:
        raise bad(f"unknown fields {sorted(unknown)} (known: {sorted(_FIELDS)})")
    for name in ("turn", "step"):
        if type(entry.get(name)) is not int or entry[name] < 1:
            raise bad(f"{name} must be an integer from 1")
    keep = entry.get("keepChunks", False)
    if type(keep) is not bool:
        raise bad("keepChunks must be true or false")
    if ("error" in entry) == ("hang" in entry):
        raise bad('give exactly one of "error" and "hang"')
    if "hang" in entry:
        if entry["hang"] is not True:
            raise bad("hang must be true")
        return Override(entry["turn"], entry["step"], None, keep)
    error = entry["error"]
    if not isinstance(error, dict) or not isinstance(error.get("message"), str) \
            or set(error) - {"message", "code", "retryable"}:
        raise bad("error must be {message, code?, retryable?}")
    code, retryable = error.get("code"), error.get("retryable")
    if code is not None and not isinstance(code, str):
        raise bad("error.code must be a string")
    if retryable is not None and type(retryable) is not bool:
        raise bad("error.retryable must be true or false")
    return Override(entry["turn"], entry["step"], CallError(error["message"], code, retryable), keep)
