"""The agent's tools (DESIGN.md section 4): one instance of each, and their specs for models."""

from __future__ import annotations

from acp_bridge.tools.base import JSON, Tool
from acp_bridge.tools.command import RunCommand
from acp_bridge.tools.files import EditFile, ListDir, ReadFile, WriteFile

ALL_TOOLS: tuple[Tool, ...] = (ReadFile(), WriteFile(), EditFile(), RunCommand(), ListDir())
_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in ALL_TOOLS}


def tool_specs() -> list[dict[str, JSON]]:
    """What a model is told about the tools: name, description and JSON Schema."""
    return [
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        for tool in ALL_TOOLS
    ]


def get_tool(name: str) -> Tool | None:
    return _BY_NAME.get(name)


__all__ = ["ALL_TOOLS", "get_tool", "tool_specs"]
