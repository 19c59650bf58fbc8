"""The local machine as a whole client for tests that drive the turn runner in-process:
`LocalServices` for files and commands, and scripted answers to permission requests
(a person at an editor gives them in production, through `session/request_permission`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio.abc

from acp_bridge.tools.base import PermissionOutcome, PermissionRequest
from acp_bridge.tools.local import LocalServices

PermissionAnswer = Callable[[PermissionRequest], PermissionOutcome | Awaitable[PermissionOutcome]]


def reject_once(request: PermissionRequest) -> PermissionOutcome:
    return PermissionOutcome("selected", "reject_once")


class ScriptedClient(LocalServices):
    """ClientServices on this machine whose permission answers come from
    `permission_answer` (default: reject once)."""

    def __init__(
        self,
        *,
        task_group: anyio.abc.TaskGroup | None = None,
        permission_answer: PermissionAnswer = reject_once,
    ) -> None:
        super().__init__(task_group=task_group)
        self._permission_answer = permission_answer

    async def request_permission(self, request: PermissionRequest) -> PermissionOutcome:
        answer = self._permission_answer(request)
        if inspect.isawaitable(answer):
            return await answer
        return answer

    async def elicit(self, call_id: str, request: Mapping[str, Any]) -> dict[str, Any]:
        return {"action": "decline"}  # nobody to show a form to

    def elicitation_complete(self, elicitation_id: str) -> None:
        pass  # never shown one
