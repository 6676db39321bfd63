#!/usr/bin/env python3
"""An exec handler for neko-sidecar: the `weather` tool, run once per call.

stdin: the callback JSON, {"name", "arguments", "call_id", "raw_arguments"}.
env:   NEKO_TOOL_NAME, NEKO_CALL_ID, plus the manifest's `env`.
stdout: the answer, an envelope {"output": ..., "is_error": false} (or plain
        JSON / text, which the sidecar wraps), or on failure
        {"output": {"error": MSG}, "is_error": true, "error": MSG}.
        main_server shows the model `output` alone (`is_error` and `error` go
        to its logs), so the message goes in `output`.
        stderr goes to the sidecar's log.
Exit 0 on every answer, failures included: a non-zero exit tells the model
the handler crashed, with the end of stderr.
"""
import json
import os
import sys

WEATHER = {"tokyo": (22, "sunny"), "osaka": (24, "cloudy"), "sapporo": (9, "snow")}

# The bytes, which JSON says are UTF-8: Windows' Python would decode
# `sys.stdin` in the ANSI code page (GBK, cp1252...), and a city typed in
# Chinese would arrive garbled.
call = json.load(sys.stdin.buffer)
city = str(call["arguments"].get("city", ""))
print(f"{os.environ['NEKO_CALL_ID']}: weather for {city!r}", file=sys.stderr)
if city.lower() in WEATHER:
    temp, sky = WEATHER[city.lower()]
    answer = {"output": {"city": city, "temp_c": temp, "weather": sky}, "is_error": False}
else:
    known = ", ".join(c.title() for c in WEATHER)
    message = f"unknown city {city!r}; known cities: {known}"
    answer = {"output": {"error": message}, "is_error": True, "error": message}
json.dump(answer, sys.stdout)
