"""A stdio MCP server for the MCP tests, built on the official SDK: tools that crash
the server, hang, return an image or a resource, and report the server's pid (and start
a grandchild in its process group, so the tests can see that a whole group dies), and
one (`grow`) that adds a tool and sends `notifications/tools/list_changed`, and two that
ask the person through MCP elicitation (`ask`: a form; `visit`: a URL, whose completion
it sends, `notifications/elicitation/complete`, once accepted; `visit_later`: the same,
completed after the call answered) and say what came back.

Run as `python tests/support/mcp_test_server.py [--pid-file PATH] [--http PORT | --sse PORT]`
(stdio by default; over HTTP on 127.0.0.1). The pid file gets
one line per process started: the server's pid, then each grandchild's.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import signal
import subprocess
import sys

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

# A 1x1 PNG.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478"
    "9c6360000002000100e221bc330000000049454e44ae426082")).decode()

server = MCPServer("acp-bridge-test")
pid_file: str | None = None


def note_pid(pid: int) -> None:
    if pid_file:
        with open(pid_file, "a", encoding="ascii") as f:
            f.write(f"{pid}\n")


@server.tool()
def echo(text: str) -> str:
    """Say `text` back."""
    return text


@server.tool()
def getenv(name: str) -> str:
    """The value of environment variable `name` in the server, or "(unset)"."""
    return os.environ.get(name, "(unset)")


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of HTTP request header `name` (over HTTP), or "(none)"."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return str(headers.get(name, "(none)")) if headers is not None else "(none)"


@server.tool()
def crash(code: int = 3) -> str:
    """Exit the server at once with `code`."""
    sys.stderr.write("crashing on purpose\n")
    sys.stderr.flush()
    os._exit(code)


@server.tool()
async def hang(seconds: float = 3600, mark: str = "") -> str:
    """Answer after `seconds`; the file `mark` (when given) says "running" meanwhile, and
    "cancelled" if the call is cancelled first."""
    if mark:
        with open(mark, "w", encoding="ascii") as f:
            f.write("running")
    try:
        await anyio.sleep(seconds)  # the slow tool call the tests cancel or time out
    except anyio.get_cancelled_exc_class():
        if mark:
            with open(mark, "w", encoding="ascii") as f:
                f.write("cancelled")
        raise
    return "woke up"


@server.tool()
def freeze() -> str:
    """Stop the server (SIGSTOP): it answers nothing, ever, until killed."""
    os.kill(os.getpid(), signal.SIGSTOP)
    return "thawed"


@server.tool()
def spawn() -> str:
    """Start a grandchild (`sleep`) in the server's process group; return both pids."""
    child = subprocess.Popen(["sleep", "600"])
    note_pid(child.pid)
    return f"server {os.getpid()} child {child.pid}"


@server.tool()
def picture() -> list[types.ContentBlock]:
    """A tiny image and an embedded resource."""
    return [types.TextContent(type="text", text="a picture"),
            types.ImageContent(type="image", data=PNG, mime_type="image/png"),
            types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
                uri="file:///notes.txt", mime_type="text/plain", text="resource text"))]


def grown(text: str) -> str:
    """A tool that exists once `grow` was called."""
    return f"grown: {text}"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `grown` and tell the client that the tool list changed."""
    server.add_tool(grown)
    await ctx.session.send_tool_list_changed()
    return "grew a tool"


class Signup(BaseModel):
    name: str
    subscribe: bool = False


@server.tool()
async def ask(ctx: Context) -> str:
    """Ask the person for a name (an elicitation form); say what they answered."""
    try:
        answer = await ctx.elicit("Who is there?", Signup)
    except Exception as exc:  # the client refused the request itself
        return f"refused: {exc}"
    if answer.action == "accept":
        return f"accept: name={answer.data.name} subscribe={answer.data.subscribe}"
    return answer.action


@server.tool()
async def visit(ctx: Context) -> str:
    """Send the person to a page (an elicitation URL); say what they answered."""
    try:
        answer = await ctx.elicit_url("Sign in on the page", "https://example.invalid/sign-in", "e-1")
    except Exception as exc:
        return f"refused: {exc}"
    if answer.action == "accept":  # the person went to the page: done there (MCP's URL mode completion)
        await ctx.session.send_elicit_complete("e-1")
    return answer.action


_later: set[asyncio.Task[None]] = set()  # completions still to send


@server.tool()
async def visit_later(ctx: Context) -> str:
    """As `visit`, but its completion comes after the call has answered (the page's work
    takes longer); first it says a completion of an elicitation it never asked."""
    await ctx.session.send_elicit_complete("never-asked")
    answer = await ctx.elicit_url("Sign in on the page", "https://example.invalid/later", "e-2")
    if answer.action == "accept":
        session = ctx.session

        async def complete() -> None:
            await anyio.sleep(0.3)  # what is tested: a completion that comes after the call answered
            await session.send_elicit_complete("e-2")

        task = asyncio.get_running_loop().create_task(complete())
        _later.add(task)
        task.add_done_callback(_later.discard)
    return answer.action


def main() -> None:
    global pid_file
    parser = argparse.ArgumentParser()
    parser.add_argument("--pid-file")
    parser.add_argument("--http", type=int, metavar="PORT", help="streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--sse", type=int, metavar="PORT", help="SSE on 127.0.0.1:PORT/sse")
    args = parser.parse_args()
    pid_file = args.pid_file
    note_pid(os.getpid())
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    elif args.sse:
        server.run("sse", host="127.0.0.1", port=args.sse)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
