"""What a snapshot compares, made stable (pure): a run's traffic and a session log with
what differs from run to run replaced.

- session ids (UUIDs) -> `<session-1>`, `<session-2>`, ... in order of first sight;
- the session cwd -> `<cwd>`, the run's other temporary paths -> `<tmp>`;
- JSON-RPC ids renumbered 1, 2, ... in order of first sight, the client's and the
  agent's requests each on their own (an answer takes the number of its request);
- times zeroed: events' `time`, the header's `createdAt`, `updatedAt` fields, ISO times;
- the model spec in `turn/start` -> `<model>` (the recording's and the replay's differ),
  the `model` config option's values -> `<model-1>`, `<model-2>`, ... in the order
  offered, the `initialize` answer's `authMethods` -> `"<auth methods>"` and its
  `agentCapabilities.auth` (`logout`) left out (they follow the recorded model's
  provider, which a replay never calls: an `openai:` model offers its key, `replay:`
  needs none), and a wrapped session's command in its header ->
  `<command>`;
- `seq` is kept: the order of the log is what is compared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_TIME_KEYS = frozenset({"updatedAt", "createdAt"})


def scrub_paths(text: str, paths: Sequence[tuple[str, str]]) -> str:
    """`text` (JSON) with each path replaced by its token, longest path first, in the
    form JSON gives it."""
    for path, token in sorted(paths, key=lambda p: -len(p[0])):
        if path:
            text = text.replace(orjson.dumps(path).decode()[1:-1], token)
    return text


def _scrub(value: Any, paths: Sequence[tuple[str, str]], sessions: dict[str, str]) -> Any:
    text = scrub_paths(orjson.dumps(value).decode(), paths)
    text = _UUID.sub(lambda m: sessions.setdefault(m.group(0), f"<session-{len(sessions) + 1}>"), text)
    text = _ISO.sub("<time>", text)
    return orjson.loads(text)


def _zero_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (0 if k in _TIME_KEYS and isinstance(v, int) else _zero_times(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_zero_times(v) for v in value]
    return value


def _model_options(value: Any) -> Any:
    """`value` with each `model` config option's model specs replaced by their place."""
    if isinstance(value, list):
        return [_model_options(v) for v in value]
    if not isinstance(value, dict):
        return value
    if value.get("id") == "model" and value.get("category") == "model" and isinstance(value.get("options"), list):
        tokens = {o.get("value"): f"<model-{i}>" for i, o in enumerate(value["options"], 1) if isinstance(o, dict)}
        options = [{**o, **{k: tokens[o.get("value")] for k in ("value", "name", "description") if k in o}}
                   if isinstance(o, dict) else o for o in value["options"]]
        return {**value, "options": options, "currentValue": tokens.get(value.get("currentValue"), "<model>")}
    if "authMethods" in value and "protocolVersion" in value:  # the initialize answer
        caps = value.get("agentCapabilities")
        if isinstance(caps, dict) and "auth" in caps:  # `logout`: offered with those methods
            value = {**value, "agentCapabilities": {k: v for k, v in caps.items() if k != "auth"}}
        return {**value, "authMethods": "<auth methods>"}
    return {k: _model_options(v) for k, v in value.items()}


def normalize_traffic(traffic: Iterable[tuple[str, Any]], paths: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Each message as `{"dir": "->" | "<-", "msg": ...}`, normalized."""
    ids: dict[tuple[str, Any], int] = {}
    counters = {"client": 0, "agent": 0}
    sessions: dict[str, str] = {}
    out = []
    for direction, message in traffic:
        msg = _model_options(_zero_times(_scrub(message, paths, sessions)))
        if isinstance(msg, dict) and "id" in msg:
            # Whose request the id belongs to: a request's sender, an answer's receiver.
            is_request = "method" in msg
            sent_by_client = direction == "->"
            owner = "client" if is_request == sent_by_client else "agent"
            key = (owner, orjson.dumps(msg["id"]).decode())
            if key not in ids:
                counters[owner] += 1
                ids[key] = counters[owner]
            msg["id"] = ids[key]
        out.append({"dir": direction, "msg": msg})
    return out


def normalize_log(lines: Iterable[bytes], paths: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """A JSONL session log (header, then events), normalized; a line that is not JSON
    is kept as `{"unparsable": text}` so a damaged log still diffs readably."""
    sessions: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for raw in lines:
        if not raw.strip():
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            out.append({"unparsable": raw.decode(errors="replace")})
            continue
        record = _scrub(record, paths, sessions)
        if isinstance(record, dict):
            if record.get("type") == "session":
                record["createdAt"] = 0
                if isinstance(record.get("wrapped"), dict) and "command" in record["wrapped"]:
                    record["wrapped"]["command"] = "<command>"  # recorded agent, or the fake one
            if isinstance(record.get("time"), int):
                record["time"] = 0
            data = record.get("data")
            if record.get("type") == "turn/start" and isinstance(data, dict) and "model" in data:
                data["model"] = "<model>"
        out.append(record)
    return out


def dump_lines(records: Iterable[Any]) -> bytes:
    """One JSON value per line, keys sorted: the golden files' form (a diff of two
    goldens is a diff of messages)."""
    return b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in records)
