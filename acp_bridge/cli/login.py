"""`acp-bridge login`: ask for the API key of `openai:` models, check it with the
provider (`OPENAI_BASE_URL`), and store it for the agent (0600).

Also what an editor runs for the `terminal` auth method: the agent's own command with
`ACP_BRIDGE_LOGIN=1` (acp_bridge.agent.auth). The key is read without echo from the
terminal, or as one line from stdin when stdin is not a terminal; it is never printed.
Exit status 0 when the key was stored, 1 otherwise.
"""

from __future__ import annotations

import argparse
import getpass
import sys

import anyio

from acp_bridge.models.openai_env import base_url
from acp_bridge.models.openai_key import check_key, key_problem, save_key


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="acp-bridge login", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    url = base_url()
    prompt = f"API key for {url} (input hidden): "
    try:
        key = getpass.getpass(prompt) if sys.stdin.isatty() else sys.stdin.readline()
    except (EOFError, KeyboardInterrupt):
        print("\nacp-bridge login: no key given", file=sys.stderr)
        return 1
    key = key.strip()
    problem = key_problem(key)
    if problem is not None:
        print(f"acp-bridge login: {problem}; nothing stored", file=sys.stderr)
        return 1
    checked = anyio.run(check_key, url, key)
    if not checked.ok:
        print(f"acp-bridge login: {checked.message}; nothing stored", file=sys.stderr)
        return 1
    path = save_key(key)
    print(f"acp-bridge login: key stored in {path} (readable by you only); {checked.message}")
    return 0
