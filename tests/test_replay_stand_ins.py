"""A `replay:` recording offered as the models it recorded (acp_bridge.models.replay_models):
a model switch inside a scenario replays with the same choices, each stand-in served
from the same recording; and a `replay:` spec takes its source whole, `#` included."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from acp_bridge.errors import ModelSpecError
from acp_bridge.models import load_model
from acp_bridge.models.catalog import ModelEntry, parse_spec
from acp_bridge.models.recording import read_recording
from acp_bridge.models.replay import ReplayModel
from acp_bridge.models.replay_models import MODELS_ENV, offered, stand_ins
from acp_bridge.snapshot import check, load_scenario
from acp_bridge.snapshot.driver import agent_env
from acp_bridge.snapshot.harness import replay_spec

RECORDED = Path(__file__).resolve().parent / "recorded"
SWITCH = RECORDED / "model_switch" / "session.jsonl"
FAST, STRONG = "openai:test-model", "openai:test-model-strong"


def test_a_recording_is_offered_as_the_models_its_log_shows() -> None:
    recording = read_recording(str(SWITCH))
    assert recording.models == (FAST, STRONG) and recording.reasoning == {STRONG}
    # No list given: the log's models in order of first sight, each with what the log
    # shows it took (a thought level recorded on a turn of the strong one).
    assert stand_ins(recording, {}) == (ModelEntry(FAST, replay=str(SWITCH)),
                                        ModelEntry(STRONG, reasoning=True, replay=str(SWITCH)))
    # A list given (as --model was when recording): its order and flags.
    listed = stand_ins(recording, {MODELS_ENV: f"{STRONG}#images {FAST}#reasoning"})
    assert listed == (ModelEntry(STRONG, images=True, replay=str(SWITCH)),
                      ModelEntry(FAST, reasoning=True, replay=str(SWITCH)))
    with pytest.raises(ModelSpecError, match=f"does not name {STRONG}, which the recording"):
        stand_ins(recording, {MODELS_ENV: FAST})
    with pytest.raises(ModelSpecError, match="is a replay; name the models it recorded"):
        stand_ins(recording, {MODELS_ENV: f"{FAST} {STRONG} replay:x.jsonl"})
    # A stand-in needs no key (a replay never calls the provider) and is made from the recording.
    assert all(entry.kind == "replay" for entry in listed) and listed[0].label == "test-model-strong"
    model = load_model(listed[0])
    assert isinstance(model, ReplayModel) and model.recording.calls.keys() == recording.calls.keys()
    # A recording with no model call offers itself; others pass through; no model twice.
    handshake = str(RECORDED / "handshake" / "session.jsonl")
    assert stand_ins(read_recording(handshake), {}) == (ModelEntry(f"replay:{handshake}"),)
    assert offered([ModelEntry("echo"), parse_spec(f"replay:{SWITCH}")], env={}) \
        == (ModelEntry("echo"), *stand_ins(recording, {}))
    with pytest.raises(ModelSpecError, match="'openai:test-model' is given twice"):
        offered([parse_spec(FAST), parse_spec(f"replay:{SWITCH}")], env={})


@pytest.mark.integration
def test_a_model_switch_replays_with_the_same_choices() -> None:
    # The fixture switches to a reasoning model, sets its thought level, switches back,
    # and loads the session after a restart: the replay offers both stand-ins.
    replayed = check(RECORDED / "model_switch")
    sets = [m["msg"] for m in replayed.traffic if m["msg"].get("method") == "session/set_config_option"]
    assert [s["params"]["value"] for s in sets] == [STRONG, "high", FAST]
    assert [e["data"]["value"] for e in replayed.log if e.get("type") == "config/set"] == [STRONG, "high", FAST]
    answers = [m["msg"]["result"] for m in replayed.traffic
               if m["dir"] == "<-" and "configOptions" in m["msg"].get("result", {})]
    assert [[o["id"] for o in a["configOptions"]] for a in answers[1:4]] \
        == [["mode", "model", "thought_level"], ["mode", "model", "thought_level"], ["mode", "model"]]


def test_the_harness_offers_the_scenarios_models_with_their_flags(tmp_path: Path) -> None:
    scenario = load_scenario(RECORDED / "model_switch")
    assert replay_spec(scenario, SWITCH) == f"replay:{SWITCH}"  # no flags on a replay
    env = agent_env({MODELS_ENV: "left over", "OPENAI_API_KEY": "sk-x"}, scenario, offline=True)
    assert env[MODELS_ENV] == f"{FAST} {STRONG}#reasoning" and "OPENAI_API_KEY" not in env
    assert MODELS_ENV not in agent_env({MODELS_ENV: "left over"}, scenario, offline=False)


def test_a_replay_spec_takes_its_source_whole() -> None:
    assert parse_spec("replay:/rec#1/session.jsonl") == ModelEntry("replay:/rec#1/session.jsonl")
    assert parse_spec("replay:run#images") == ModelEntry("replay:run#images")  # a path, not a flag
    assert parse_spec("openai:gpt-4o#no-images") == ModelEntry("openai:gpt-4o")  # others keep their flags
    with pytest.raises(ModelSpecError, match="replay:SOURCE needs a recorded session"):
        parse_spec("replay:")
    with pytest.raises(ModelSpecError, match="taken whole, '#' included"):
        load_model("replay:/nowhere/session.jsonl#images")


@pytest.mark.integration
def test_a_scenario_in_a_folder_with_a_hash_checks(tmp_path: Path) -> None:
    folder = tmp_path / "run#2" / "model_switch"
    shutil.copytree(RECORDED / "model_switch", folder)
    check(folder)
    # And the agent serves such a path from the command line.
    spec = f"replay:{folder / 'session.jsonl'}"
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
             {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}}]
    proc = subprocess.run([sys.executable, "-m", "acp_bridge", "--store", str(tmp_path / "store"), "--model", spec],
                          input=b"".join(orjson.dumps(line) + b"\n" for line in lines), capture_output=True,
                          timeout=30, check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    new = orjson.loads(proc.stdout.splitlines()[1])["result"]
    model = next(o for o in new["configOptions"] if o["id"] == "model")
    assert [o["value"] for o in model["options"]] == [FAST, STRONG] and model["currentValue"] == FAST


@pytest.mark.integration
def test_a_list_that_misses_a_recorded_model_is_refused_at_start_up(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "acp_bridge", "--store", str(tmp_path / "store"),
                           "--model", f"replay:{SWITCH}"], input=b"", capture_output=True, timeout=30, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), MODELS_ENV: f"{FAST}#images"})
    assert proc.returncode == 2 and proc.stdout == b""
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and f"{MODELS_ENV} does not name {STRONG}" in lines[0]
