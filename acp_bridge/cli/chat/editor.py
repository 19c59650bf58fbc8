"""The line editor of `acp-bridge chat` at a terminal: prompt_toolkit, imported only here
and only when both stdin and stdout are terminals (piped input is read line by line by
`connection.LineInput`, and `acp-bridge serve` never imports this module).

What it gives a person (docs/chat.md, "Typing"):

- cursor movement and the usual Emacs keys (Left/Right, Home/End, Ctrl-A/E/K/U/W, Alt-B/F);
- history across runs: Up/Down and Ctrl-R over the prompts of earlier chats, kept in
  `chat_history` in the store folder (mode 0600: prompts may hold anything); answers to
  permission questions are not kept;
- multi-line prompts: Alt-Enter (or Esc then Enter) starts a new line, Enter sends;
- pastes of any length, newlines included, arrive whole (bracketed paste): the
  terminal's line discipline, which cuts a line at 4,095 bytes, is not in the way;
- Ctrl-C clears a line that has text; on an empty line it quits (as a Ctrl-C while idle
  always did), and while a permission question waits it cancels the prompt; Ctrl-D on
  an empty line ends the input.

Ctrl-C reaches the chat as a key here (the terminal is in raw mode while the editor
reads), not as SIGINT: `readline` raises KeyboardInterrupt and the chat decides.
SIGINT stays the chat's own (anyio's receiver): the editor is told not to touch it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

HISTORY_FILE = "chat_history"


class PrivateHistory(FileHistory):
    """A FileHistory written with mode 0600 that never stops the chat: a store that
    cannot be written loses the history (said once on stderr), not the prompt."""

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path
        self.failed = False

    def store_string(self, string: str) -> None:
        if self.failed:
            return
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            super().store_string(string)
        except OSError as exc:
            self.failed = True
            print(f"acp-bridge chat: the prompt history is not kept: {exc}", file=sys.stderr)


def history_for(store: Path) -> History:
    """The prompt history in the store folder, or in memory if the folder does not exist
    (the chat never creates the store: the agent does)."""
    if store.is_dir():
        return PrivateHistory(store / HISTORY_FILE)
    return InMemoryHistory()


class LineEditor:
    """Reads prompts (with the shared history) and answers to questions (without)."""

    def __init__(self, history: History) -> None:
        self._clear_first = False  # Ctrl-C on a line with text clears it (idle prompt only)
        keys = self._keys()
        common: dict[str, Any] = {"key_bindings": keys, "prompt_continuation": _continuation,
                                  "enable_history_search": False}
        self._prompts: PromptSession[str] = PromptSession(history=history, **common)
        self._answers: PromptSession[str] = PromptSession(history=InMemoryHistory(), **common)

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        has_text = Condition(lambda: self._clear_first)

        @keys.add("escape", "enter")
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        @keys.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            buffer = event.current_buffer
            if has_text() and buffer.text:
                buffer.reset()
            else:
                event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

        return keys

    async def readline(self, message: str, *, question: bool = False) -> str | None:
        """The next line (newlines inside it kept), or None at Ctrl-D on an empty line.
        Raises KeyboardInterrupt for Ctrl-C (on an empty line, or at a question)."""
        session = self._answers if question else self._prompts
        self._clear_first = not question
        try:
            return await session.prompt_async(message, handle_sigint=False)
        except EOFError:
            return None


def _continuation(width: int, line_number: int, wrap_count: int) -> str:
    return "." * (width - 1) + " " if width > 1 else ""
