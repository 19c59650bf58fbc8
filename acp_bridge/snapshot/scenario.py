"""A snapshot scenario: the client script in `DIR/scenario.json` and the files beside it
(docs/snapshots.md has the format for users).

    {"steps": [
       {"op": "initialize", "clientCapabilities"?: {...}},
       {"op": "new_session", "additionalDirectories"?: [...]},
       {"op": "prompt", "text": "...", "permissions"?: ["allow_once", ...],
        "cancelAfterUpdates"?: N, "expectError"?: true},
       {"op": "set_mode", "mode": "accept_edits"},
       {"op": "set_config", "configId": "thought_level", "value": "high"},
       {"op": "load"},     {"op": "resume"},    {"op": "close"},
       {"op": "restart"}   (the agent exits at end of input and starts again, same store)
     ],
     "model"?: "openai:gpt-4o-mini",   (what `record` uses unless --model says; a list
                                        offers several, the first the default)
     "wrap"?: ["COMMAND", "ARG", ...],  (record `acp-bridge wrap -- COMMAND...` instead of
                                         serve; `{python}` is this Python, `{scenario}` this
                                         folder, `{tmp}` the run's temporary folder; check
                                         replays it with the fake agent)
     "env"?: {"NAME": "value"},         (for the agent, record and check alike)
     "check"?: "strict" | "loose",
     "maxSteps"?: N}

A scenario records one session: the one its `new_session` creates (one per scenario).
`permissions` answers the prompt's permission requests in order, by option kind
(`allow_once`, `allow_always`, `reject_once`, `reject_always`), or `cancelled` (the
answer's outcome), or `cancel` (the client sends `session/cancel`, then answers
`cancelled`); a request with no answer left is answered `cancelled`.
With `fs` in `clientCapabilities`, the client serves `fs/*` in the workspace copy.
`cancelAfterUpdates` sends `session/cancel` once the prompt has had that many
`session/update`s. `expectError` says the prompt is answered with an error (the run
fails otherwise, and a prompt answered with an error fails it unless expected).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from acp_bridge.errors import ScenarioError

SCENARIO_FILE = "scenario.json"
RECORDING_FILE = "session.jsonl"  # the recorded log: the replay's source
OVERRIDES_FILE = "session.overrides.json"  # models.replay_overrides: beside the recording
TRAFFIC_FILE = "traffic.jsonl"  # the normalized traffic golden
REPLAYED_FILE = "replayed.jsonl"  # the re-persisted log's golden, when overrides change it
WORKSPACE_DIR = "workspace"

PERMISSION_ANSWERS = frozenset({"allow_once", "allow_always", "reject_once", "reject_always",
                                "cancelled", "cancel"})
_OPS: dict[str, frozenset[str]] = {
    "initialize": frozenset({"clientCapabilities"}),
    "new_session": frozenset({"additionalDirectories"}),
    "prompt": frozenset({"text", "prompt", "permissions", "cancelAfterUpdates", "expectError"}),
    "set_mode": frozenset({"mode"}),
    "set_config": frozenset({"configId", "value"}),
    "load": frozenset(),
    "resume": frozenset(),
    "close": frozenset(),
    "restart": frozenset(),
}
_TOP = frozenset({"steps", "model", "env", "check", "maxSteps", "description", "wrap"})


@dataclass(frozen=True)
class Step:
    op: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    folder: Path
    steps: tuple[Step, ...]
    model: tuple[str, ...] = ()  # the model specs to record with, the first the default
    env: dict[str, str] = field(default_factory=dict)
    check: str = "strict"
    max_steps: int | None = None
    wrap: tuple[str, ...] = ()  # the wrapped agent's command line, for a wrap scenario

    @property
    def name(self) -> str:
        return self.folder.name

    def path(self, name: str) -> Path:
        return self.folder / name


def load_scenario(folder: Path) -> Scenario:
    """Read and check `folder/scenario.json`. Raises ScenarioError naming what is wrong."""
    path = folder / SCENARIO_FILE
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise ScenarioError(f"{folder}: no {SCENARIO_FILE} (a snapshot scenario folder has one)") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read it: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ScenarioError(f"{path}: not JSON: {exc}") from None

    def bad(why: str) -> ScenarioError:
        return ScenarioError(f"{path}: {why}")

    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise bad('expected {"steps": [...], ...}')
    if set(doc) - _TOP:
        raise bad(f"unknown fields {sorted(set(doc) - _TOP)}")
    steps = tuple(_step(n, entry, bad) for n, entry in enumerate(doc["steps"], start=1))
    if sum(1 for s in steps if s.op == "new_session") != 1:
        raise bad("a scenario has exactly one new_session step (it records one session)")
    if steps[0].op != "initialize":
        raise bad("the first step is initialize")
    env = doc.get("env", {})
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise bad("env must map names to strings")
    if doc.get("check", "strict") not in ("strict", "loose"):
        raise bad("check must be strict or loose")
    max_steps = doc.get("maxSteps")
    if max_steps is not None and (type(max_steps) is not int or max_steps < 1):
        raise bad("maxSteps must be a positive integer")
    model = doc.get("model", [])
    model = [model] if isinstance(model, str) else model
    if not (isinstance(model, list) and all(isinstance(m, str) and m for m in model)) \
            or ("model" in doc and not model):
        raise bad("model must be a model spec, or a non-empty list of them (the first the default)")
    wrap = doc.get("wrap", [])
    if not (isinstance(wrap, list) and all(isinstance(a, str) for a in wrap)) or ("wrap" in doc and not wrap):
        raise bad("wrap must be the wrapped agent's command line: a non-empty list of strings")
    return Scenario(folder, steps, tuple(model), dict(env), doc.get("check", "strict"), max_steps, tuple(wrap))


def _step(number: int, entry: Any, bad: Any) -> Step:
    if not isinstance(entry, dict) or entry.get("op") not in _OPS:
        raise bad(f"step {number}: expected {{op: {' | '.join(_OPS)}, ...}}")
    op = entry["op"]
    args = {k: v for k, v in entry.items() if k != "op"}
    unknown = set(args) - _OPS[op]
    if unknown:
        raise bad(f"step {number} ({op}): unknown fields {sorted(unknown)}")
    if op == "prompt":
        if ("text" in args) == ("prompt" in args):
            raise bad(f"step {number} (prompt): give text or prompt (ContentBlocks), not both")
        if "text" in args and not isinstance(args["text"], str):
            raise bad(f"step {number} (prompt): text must be a string")
        if "prompt" in args and not isinstance(args["prompt"], list):
            raise bad(f"step {number} (prompt): prompt must be a list of ContentBlocks")
        answers = args.get("permissions", [])
        if not isinstance(answers, list) or not set(answers) <= PERMISSION_ANSWERS:
            raise bad(f"step {number} (prompt): permissions must be a list of {sorted(PERMISSION_ANSWERS)}")
        after = args.get("cancelAfterUpdates")
        if after is not None and (type(after) is not int or after < 0):
            raise bad(f"step {number} (prompt): cancelAfterUpdates must be a non-negative integer")
    if op == "set_mode" and not isinstance(args.get("mode"), str):
        raise bad(f"step {number} (set_mode): mode must be a string")
    if op == "set_config" and not (isinstance(args.get("configId"), str)
                                   and isinstance(args.get("value"), str | bool)):
        raise bad(f"step {number} (set_config): configId must be a string, value a string or a boolean")
    return Step(op, args)
