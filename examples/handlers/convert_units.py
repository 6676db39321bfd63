#!/usr/bin/env python3
"""An exec handler for neko-sidecar: the `convert_units` tool, run once per call.

stdin:  the callback JSON, {"name", "arguments", "call_id", "raw_arguments"}.
        The sidecar has already checked `arguments` against the tool's schema
        (examples/tools/schemas/convert_units.schema.json), so no re-checking.
stdout: an envelope, {"output": ..., "is_error": false}, or on failure
        {"output": {"error": MSG}, "is_error": true, "error": MSG}.
        main_server shows the model `output` alone (`is_error` and `error` go
        to its logs), so the sentence for the model goes in `output`.
"""
import json
import sys

# Each unit as (dimension, factor to the base unit); temperatures are special.
UNITS = {"m": ("length", 1.0), "km": ("length", 1000.0), "mi": ("length", 1609.344),
         "ft": ("length", 0.3048), "kg": ("mass", 1.0), "lb": ("mass", 0.45359237),
         "c": ("temperature", None), "f": ("temperature", None)}

# The bytes, which JSON says are UTF-8: Windows' Python would decode
# `sys.stdin` in the ANSI code page (GBK, cp1252...).
args = json.load(sys.stdin.buffer)["arguments"]
value, src, dst = args["value"], args["from"], args["to"]
if UNITS[src][0] != UNITS[dst][0]:
    message = f"cannot convert {UNITS[src][0]} ({src}) to {UNITS[dst][0]} ({dst})"
    answer = {"output": {"error": message}, "is_error": True, "error": message}
else:
    if UNITS[src][0] == "temperature":
        celsius = value if src == "c" else (value - 32) * 5 / 9
        result = celsius if dst == "c" else celsius * 9 / 5 + 32
    else:
        result = value * UNITS[src][1] / UNITS[dst][1]
    answer = {"output": {"value": round(result, 6), "unit": dst}, "is_error": False}
json.dump(answer, sys.stdout)
