#!/bin/sh
# An npm-style launcher (as npx starts codex-acp, gemini-cli, qwen-code, copilot): it
# starts the real agent as a child of its own, in the background, and waits, or, if
# $LAUNCHER_EXIT_ON names a file, exits (status 3) once that file exists, leaving the
# agent behind. The agent inherits its stdout; its stdin is handed on explicitly (a
# background job's stdin is /dev/null otherwise). For tests/test_wrap_unruly.py.
#
#     sh tests/support/launcher.sh COMMAND [ARGS...]
exec 3<&0
"$@" <&3 3<&- &
exec 3<&-
if [ -n "$LAUNCHER_EXIT_ON" ]; then
  while [ ! -e "$LAUNCHER_EXIT_ON" ]; do sleep 0.01; done
  exit 3
fi
wait
