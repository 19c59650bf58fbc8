"""The models a `replay:` recording is offered as: one stand-in for each model the
recorded session ran or switched to, each served from the same recording
(docs/snapshots.md, "The `replay:` model").

A session that switched models mid-way (`session/set_config_option` for `model`) is
replayed with the same choices: the model selector offers the recorded specs (so the
client's `set_config_option` names the value it named when recording, and the log gets
the same `config/set` and `turn/start.model`), and whichever is chosen, each call is
served from the recording at its (turn, step). A stand-in takes what its model took:

- `$ACP_BRIDGE_REPLAY_MODELS` (the specs, flags and all, as `--model` was given when
  recording, separated by whitespace, the first the default; the harness sets it from
  the scenario's `model`); it must name every model the recording ran;
- else the models of the log in order of first sight, each with the catalog's flags,
  plus a reasoning effort if a turn on it recorded a thought level and images if a
  prompt on it held one;
- a recording with no model (no turn, no switch) is offered as itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from acp_bridge.errors import ModelSpecError
from acp_bridge.models.catalog import ModelEntry, parse_spec
from acp_bridge.models.recording import Recording, read_recording

MODELS_ENV = "ACP_BRIDGE_REPLAY_MODELS"


def stand_ins(recording: Recording, env: Mapping[str, str] | None = None) -> tuple[ModelEntry, ...]:
    """The models `recording` is offered as (see the module docstring)."""
    env = os.environ if env is None else env
    source = recording.source
    given = env.get(MODELS_ENV, "").split()
    if given:
        entries = []
        for text in given:
            try:
                entry = parse_spec(text)
            except ModelSpecError as exc:
                raise ModelSpecError(f"{MODELS_ENV}: {exc}") from None
            if entry.kind == "replay":
                raise ModelSpecError(f"{MODELS_ENV}: {text!r} is a replay; name the models it recorded")
            entries.append(replace(entry, replay=source))
        missing = [m for m in recording.models if all(e.spec != m for e in entries)]
        if missing:
            raise ModelSpecError(f"{MODELS_ENV} does not name {', '.join(missing)}, which the recording "
                                 f"replay:{source} ran or switched to")
        return tuple(entries)
    if not recording.models:
        return (ModelEntry(f"replay:{source}"),)
    out = []
    for spec in recording.models:
        try:
            entry = parse_spec(spec)
        except ModelSpecError:
            entry = ModelEntry(spec)  # a model this version does not know: text only
        out.append(replace(entry, replay=source, images=entry.images or spec in recording.images,
                           reasoning=entry.reasoning or spec in recording.reasoning))
    return tuple(out)


def offered(entries: Sequence[ModelEntry], *, store_dir: Path | str | None = None, backend: str = "jsonl",
            env: Mapping[str, str] | None = None) -> tuple[ModelEntry, ...]:
    """`entries` with each `replay:` spec replaced by its stand-ins; the same model
    twice is refused (the selector's values are unique)."""
    out: list[ModelEntry] = []
    for entry in entries:
        if entry.kind == "replay" and entry.replay is None:
            recording = read_recording(entry.spec.partition(":")[2], store_dir=store_dir, backend=backend)
            more = stand_ins(recording, env)
        else:
            more = (entry,)
        for one in more:
            if any(e.spec == one.spec for e in out):
                raise ModelSpecError(f"model {one.spec!r} is given twice (a replay offers the models "
                                     "it recorded)")
            out.append(one)
    return tuple(out)
