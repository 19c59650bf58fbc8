#!/bin/sh
# An npm-style launcher (as npx starts codex-acp, gemini-cli, qwen-code, copilot): it
# starts the real agent as a child of its own, in the background, and waits, or, if
# $LAUNCHER_EXIT_ON names a file, exits (status 3) once that file exists, leaving the
# agent behind. With $LAUNCHER_SETSID set the agent leaves the launcher's process group
# (setsid), as a daemonizing helper would. The agent inherits its stdout; its stdin is
# handed on explicitly (a background job's stdin is /dev/null otherwise). For
# tests/test_wrap_child_death.py.
#
#     sh tests/support/launcher.sh COMMAND [ARGS...]
exec 3<&0
if [ -n "$LAUNCHER_SETSID" ]; then
  setsid "$@" <&3 3<&- &
else
  "$@" <&3 3<&- &
fi
exec 3<&-
if [ -n "$LAUNCHER_EXIT_ON" ]; then
  while [ ! -e "$LAUNCHER_EXIT_ON" ]; do sleep 0.01; done
  exit 3
fi
wait
