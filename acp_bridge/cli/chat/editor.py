"""The line editor of `acp-bridge chat` at a terminal: prompt_toolkit, imported only here
and only when both stdin and stdout are terminals (piped input is read line by line by
`connection.LineInput`, and `acp-bridge serve` never imports this module).

What it gives a person (docs/chat.md, "Typing"):

- cursor movement and the usual Emacs keys (Left/Right, Home/End, Ctrl-A/E/K/U/W, Alt-B/F);
- history across runs: Up/Down and Ctrl-R over the prompts of earlier chats, kept in
  `chat_history` in the store folder (mode 0600: prompts may hold anything), the newest
  1,000 within 1 MB (trimmed when the chat starts); answers to permission questions
  are not kept;
- multi-line prompts: Alt-Enter (or Esc then Enter) starts a new line, Enter sends;
- pastes of any length, newlines included, arrive whole (bracketed paste): the
  terminal's line discipline, which cuts a line at 4,095 bytes, is not in the way;
- output that arrives while a line is read (the agent's, during a permission question)
  is printed above the line, which is drawn again below it (`LineEditor.write_above`);
- Tab completes a `/command` at the start of a line: the chat's own, then the ones the
  agent offers in the session (`slash_completions`; listed as the line is typed);
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
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

import anyio
from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

HISTORY_FILE = "chat_history"
# The history keeps the newest prompts within both limits, trimmed when a chat starts:
# enough for Up and Ctrl-R, and a file that does not grow with every prompt ever typed.
HISTORY_ENTRIES = 1000
HISTORY_BYTES = 1_000_000


def trim_history(path: Path, *, entries: int = HISTORY_ENTRIES, size: int = HISTORY_BYTES) -> None:
    """Keep the newest `entries` prompts of the history file at `path` that fit in
    `size` bytes (FileHistory's format: each prompt is a `# time` line, then its lines
    each after a `+`). Rewritten whole (mode 0600, replaced at once) only when over."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    groups: list[bytes] = []
    for line in data.split(b"\n"):
        if line.startswith(b"#") or not groups:
            groups.append(b"")
        if line:
            groups[-1] += line + b"\n"
    kept: list[bytes] = []
    total = 0
    for group in reversed(groups):
        if not group.strip() or (group.startswith(b"#") and b"\n+" not in group):
            continue  # a stray line, or a time with no prompt
        if len(kept) == entries or total + len(group) + 1 > size:
            break
        kept.append(b"\n" + group)
        total += len(group) + 1
    trimmed = b"".join(reversed(kept))
    if len(trimmed) >= len(data):
        return
    spare = path.with_name(path.name + ".trim")
    with open(os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(trimmed)
    os.replace(spare, path)


class PrivateHistory(FileHistory):
    """A FileHistory written with mode 0600 that never stops the chat: a store that
    cannot be written loses the history (said once on stderr), not the prompt."""

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path
        self.failed = False
        try:
            trim_history(path)
        except OSError as exc:
            print(f"acp-bridge chat: the prompt history could not be trimmed: {exc}", file=sys.stderr)

    def store_string(self, string: str) -> None:
        if self.failed:
            return
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            super().store_string(string)
        except OSError as exc:
            self.failed = True
            print(f"acp-bridge chat: the prompt history is not kept: {exc}", file=sys.stderr)


class StoreHistory(History):
    """The prompt history in the store folder, once there is one: the chat never creates
    the store (the agent does, at its first session, which the chat makes at the first
    prompt), so the prompts typed before it exists are kept here and written as soon as
    it does (at the next prompt or question, or when the chat ends: `keep`)."""

    def __init__(self, store: Path) -> None:
        super().__init__()
        self.store = store
        self._file: PrivateHistory | None = None
        self._waiting: list[str] = []
        self.keep()

    def keep(self) -> None:
        """Open the history file if the store exists now, and write what waited for it."""
        if self._file is None and self.store.is_dir():
            self._file = PrivateHistory(self.store / HISTORY_FILE)
        if self._file is not None:
            waiting, self._waiting = self._waiting, []
            for string in waiting:
                self._file.store_string(string)

    def load_history_strings(self) -> Iterable[str]:
        return self._file.load_history_strings() if self._file is not None else iter(())

    def store_string(self, string: str) -> None:
        self._waiting.append(string)
        self.keep()


def history_for(store: Path) -> StoreHistory:
    """The prompt history of a chat whose store is the folder `store`."""
    return StoreHistory(store)


def slash_completions(text: str, names: Iterable[str]) -> list[str]:
    """The commands among `names` (each `/NAME`) that complete `text`, the line so far:
    only a first word that starts with one `/` (`//text` sends text as it is)."""
    if not text.startswith("/") or text.startswith("//") or any(c.isspace() for c in text):
        return []
    return [name for name in dict.fromkeys(names) if name.startswith(text) and name != text]


class SlashCompleter(Completer):
    """prompt_toolkit's side of `slash_completions`, over the names as they are now."""

    def __init__(self, names: Callable[[], Iterable[str]]) -> None:
        self.names = names

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        for name in slash_completions(text, self.names()):
            yield Completion(name, start_position=-len(text))


class LineEditor:
    """Reads prompts (with the shared history) and answers to questions (without)."""

    def __init__(self, history: StoreHistory, commands: Callable[[], Iterable[str]] = tuple) -> None:
        self.history = history
        self._clear_first = False  # Ctrl-C on a line with text clears it (idle prompt only)
        keys = self._keys()
        common: dict[str, Any] = {"key_bindings": keys, "prompt_continuation": _continuation,
                                  "enable_history_search": False}
        self._prompts: PromptSession[str] = PromptSession(history=history, completer=SlashCompleter(commands),
                                                          complete_while_typing=True, **common)
        self._answers: PromptSession[str] = PromptSession(history=InMemoryHistory(), **common)
        self._reading: PromptSession[str] | None = None
        self._above: list[Awaitable[None]] = []  # writes above the line, not yet done

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
        self.history.keep()  # the prompt before may have made the store
        self._clear_first = not question
        self._reading = session
        try:
            return await session.prompt_async(message, handle_sigint=False)
        except EOFError:
            return None
        finally:
            self._reading = None
            with anyio.CancelScope(shield=True):  # what was written above comes before what follows
                while self._above:
                    await self._above.pop(0)

    def write_above(self, text: str, stream: TextIO | None = None) -> bool:
        """While a line is read: print `text` above it, on lines of its own, and draw
        the line being edited again below (prompt_toolkit's `run_in_terminal`), so
        that output arriving during a question does not garble it. False when no line
        is being read: the caller prints `text` itself. To stdout unless `stream`."""
        if self._reading is None or not self._reading.app.is_running:
            return False

        out = stream or sys.stdout

        def show() -> None:
            out.write(text if text.endswith("\n") else text + "\n")
            out.flush()

        self._above.append(run_in_terminal(show, in_executor=False))
        return True


def _continuation(width: int, line_number: int, wrap_count: int) -> str:
    return "." * (width - 1) + " " if width > 1 else ""
