"""Record what a real ACP agent says to its client, as a fixture for the offline tests of
`acp-bridge wrap` (tests/test_wrap_fidelity.py, played back by tests/support/replay_child.py).

    python -m tests.support.record_agent OUT.jsonl [--mode MODE] [--env K=V ...] -- COMMAND [ARGS...]

A small ACP client, with a fake model on 127.0.0.1 (tests/support/fake_model.py: its URL
is `{model}` in the `--env` values and the arguments): `initialize` (fs and terminal
offered, served on the local machine by acp_bridge.client's methods), `session/new` in
a fresh folder holding notes.txt, `session/set_mode MODE` if asked, then two prompts, a
text answer ("Say hello.") and a shell command ("RUN: cat notes.txt") unless `--prompt`s
are given, every permission
request answered with its first allow option. Every JSON-RPC line that passes, either
way, is written in the order it passed: `{"from": "agent" | "client", "msg": ...}`.

Not part of the test suite: it needs the agent installed (docs/wrap.md, "Tested
against", says which versions were recorded and how).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson

from acp_bridge.client.methods import ClientMethods
from acp_bridge.host.params import check_client_params
from tests.support.fake_model import respond
from tests.support.sse_server import SSEServer

CWD = "/tmp/acp-fixture"  # fixed, so a fixture names the same folder every time it is recorded
NOTES = "notes from the fixture\nsecond line\n"
PROMPTS = ("Say hello.", "RUN: cat notes.txt")
TIMEOUT = 120.0


class Recorder:
    def __init__(self, process: anyio.abc.Process, out: list[dict[str, Any]], tg: anyio.abc.TaskGroup) -> None:
        self.process = process
        self.out = out
        self.next_id = 0
        self.waiting: dict[int, anyio.Event] = {}
        self.answers: dict[int, dict[str, Any]] = {}
        self.methods = ClientMethods(tg, self.permission, check=check_client_params)
        self.tg = tg

    async def send(self, msg: dict[str, Any]) -> None:
        self.out.append({"from": "client", "msg": msg})
        assert self.process.stdin is not None
        await self.process.stdin.send(orjson.dumps(msg) + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        rid = self.next_id
        self.waiting[rid] = done = anyio.Event()
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with anyio.fail_after(TIMEOUT):
            await done.wait()
        answer = self.answers.pop(rid)
        if "error" in answer:
            print(f"{method}: error {answer['error']}", file=sys.stderr)
        return answer

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for data in self.process.stdout:
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    msg = orjson.loads(line)
                except orjson.JSONDecodeError:
                    print(f"not JSON on stdout: {line[:200]!r}", file=sys.stderr)
                    continue
                self.out.append({"from": "agent", "msg": msg})
                if "method" in msg and "id" in msg:
                    self.tg.start_soon(self.serve, msg)
                elif "id" in msg and msg["id"] in self.waiting:
                    self.answers[msg["id"]] = msg
                    self.waiting.pop(msg["id"]).set()

    async def serve(self, msg: dict[str, Any]) -> None:
        try:
            result = await self.methods.serve(msg["method"], msg.get("params") or {})
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"], "result": result}
        except Exception as exc:  # an fs or terminal failure goes back as the agent would see it
            answer = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32603, "message": str(exc)}}
        await self.send(answer)

    async def permission(self, **params: Any) -> dict[str, Any]:
        options = params.get("options") or []
        chosen = next((o for o in options if o.get("kind") == "allow_once"), options[0] if options else None)
        if chosen is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}


async def record(command: list[str], env: dict[str, str], mode: str | None,
                 prompts: tuple[str, ...]) -> list[dict[str, Any]]:
    shutil.rmtree(CWD, ignore_errors=True)
    Path(CWD).mkdir()
    Path(CWD, "notes.txt").write_text(NOTES)
    out: list[dict[str, Any]] = []
    async with await anyio.open_process(command, env=env, cwd=CWD, stderr=sys.stderr) as process, \
            anyio.create_task_group() as tg:
        rec = Recorder(process, out, tg)
        tg.start_soon(rec.read)
        await rec.request("initialize", {"protocolVersion": 1, "clientCapabilities": {
            "fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True},
            "clientInfo": {"name": "acp-bridge-fixture-recorder", "version": "1"}})
        new = await rec.request("session/new", {"cwd": CWD, "mcpServers": []})
        sid = new["result"]["sessionId"]
        if mode is not None:
            await rec.request("session/set_mode", {"sessionId": sid, "modeId": mode})
        for prompt in prompts:
            await rec.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]})
        await anyio.sleep(1.0)  # what the agent sends after its last answer
        await rec.methods.terminals.close_all()
        process.terminate()
        tg.cancel_scope.cancel()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(prog="record_agent")
    parser.add_argument("out")
    parser.add_argument("--mode")
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--prompt", action="append", help="the prompts, in order (default: the two above)")
    parser.add_argument("--home", help="the agent's HOME (kept afterwards: the native files it wrote, "
                                       "tests/recorded/native/); default: a temporary folder")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    with SSEServer(respond) as server, tempfile.TemporaryDirectory() as temp:
        home = args.home or temp
        Path(home).mkdir(parents=True, exist_ok=True)
        fill = {"model": server.url.removesuffix("/v1"), "home": home}
        env = {**os.environ, "HOME": home}
        for pair in args.env:
            key, _, value = pair.partition("=")
            env[key] = value.format(**fill)
        command = [part.format(**fill) for part in args.command]
        out = anyio.run(record, command, env, args.mode, tuple(args.prompt or PROMPTS))
        print(f"{len(server.requests)} model requests: {[r.path for r in server.requests]}", file=sys.stderr)
    Path(args.out).write_bytes(b"".join(orjson.dumps(entry) + b"\n" for entry in out))
    print(f"{len(out)} messages written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
