#!/bin/sh
# An exec handler for neko-sidecar in POSIX sh: the `disk_usage` tool (no
# arguments), run once per call.
#
# stdin:  the callback JSON (read and ignored here; a handler may also leave
#         it unread).
# env:    NEKO_TOOL_NAME, NEKO_CALL_ID, plus the manifest's `env`; DISK_PATH
#         (default: the working directory) says which filesystem to report.
# stdout: plain text, which the sidecar turns into a string output. Print an
#         envelope instead to report a failure the model should read, e.g.
#         {"output": {"error": "MSG"}, "is_error": true, "error": "MSG"}:
#         main_server shows the model `output` alone (`is_error` and `error`
#         go to its logs), so the message goes in `output`.
# A non-zero exit is reported to the model with the end of stderr.
cat >/dev/null
echo "$NEKO_CALL_ID: disk usage of ${DISK_PATH:-.}" >&2
df -hP "${DISK_PATH:-.}" | awk 'NR == 2 { print $3 " used of " $2 " (" $5 "), " $4 " free, on " $6 }'
