"""The agent's tools (DESIGN.md section 4): one instance of each, and their specs for models.

The tool modules load on first use (`ALL_TOOLS`, `get_tool`, `tool_specs`), not when a
submodule such as `acp_bridge.tools.base` is imported: nothing on the way to the
`initialize` answer needs them (DESIGN.md section 1).
"""

from __future__ import annotations

# typing's, without importing typing with the package (the wrapper imports the reaper
# before it spawns its child: issue 32); mypy takes any TYPE_CHECKING as True.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from acp_bridge.tools.base import JSON, Tool

    ALL_TOOLS: tuple[Tool, ...]

_loaded: tuple[tuple[Tool, ...], dict[str, Tool]] | None = None


def _tools() -> tuple[tuple[Tool, ...], dict[str, Tool]]:
    global _loaded
    if _loaded is None:
        from acp_bridge.tools.command import RunCommand
        from acp_bridge.tools.files import EditFile, ListDir, ReadFile, WriteFile

        tools: tuple[Tool, ...] = (ReadFile(), WriteFile(), EditFile(), RunCommand(), ListDir())
        _loaded = tools, {tool.name: tool for tool in tools}
    return _loaded


def __getattr__(name: str) -> Any:
    if name == "ALL_TOOLS":
        return _tools()[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tool_specs() -> list[dict[str, JSON]]:
    """What a model is told about the tools: name, description and JSON Schema."""
    return [
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        for tool in _tools()[0]
    ]


def get_tool(name: str) -> Tool | None:
    return _tools()[1].get(name)


__all__ = ["ALL_TOOLS", "get_tool", "tool_specs"]
