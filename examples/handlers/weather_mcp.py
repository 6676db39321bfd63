#!/usr/bin/env python3
"""An MCP server for neko-sidecar: the weather tool of weather_exec.py, over stdio.

The sidecar starts it once (see examples/tools/weather_mcp.toml), lists its
tools and sends every call as an MCP tools/call on the same pipe: no
interpreter start per call. Built with the official Python SDK, 2.x:

    python3 -m venv venv && venv/bin/pip install 'mcp>=2,<3'
    py -3 -m venv venv; venv/Scripts/pip install "mcp>=2,<3"   (Windows PowerShell)

(Debian: apt-get install python3-venv first; the manifest's `command` then
names venv/bin/python3.) By hand, speak JSON-RPC on stdin, one line each:

    venv/bin/python3 weather_mcp.py
    {"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"me","version":"0"}}}
    {"jsonrpc":"2.0","method":"notifications/initialized"}
    {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_weather","arguments":{"city":"Tokyo"}}}

`weather_mcp.py --exec` answers one call the exec-handler way instead (the
callback JSON on stdin, an envelope on stdout) without importing the SDK:
bench/mcp.sh measures the same code both ways.
"""
import json
import os
import sys

WEATHER = {"tokyo": (22, "sunny"), "osaka": (24, "cloudy"), "sapporo": (9, "snow")}


def weather(city):
    """The tool itself: {"city", "temp_c", "weather"}, or LookupError with a sentence for the model."""
    if city.lower() not in WEATHER:
        known = ", ".join(c.title() for c in WEATHER)
        raise LookupError(f"unknown city {city!r}; known cities: {known}")
    temp, sky = WEATHER[city.lower()]
    return {"city": city, "temp_c": temp, "weather": sky}


def serve():
    # Imported here, so that --exec does not pay for loading the SDK.
    from typing import Annotated, TypedDict

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    class Weather(TypedDict):  # a typed return: a structured result with an outputSchema
        city: str
        temp_c: int
        weather: str

    # Logs go to stderr, which the sidecar logs; LOG_LEVEL comes from the manifest's env.
    server = MCPServer("weather", log_level=os.environ.get("LOG_LEVEL", "WARNING"))

    @server.tool()
    def get_weather(city: Annotated[str, Field(description="City name, e.g. Tokyo, Osaka or Sapporo")]) -> Weather:
        """Current weather of a city. Use it when the user asks about the weather somewhere."""
        try:
            return weather(city)
        except LookupError as e:
            raise ToolError(str(e)) from None  # an is_error result the model reads

    server.run()  # stdio


def exec_once():
    # The bytes, which JSON says are UTF-8 (not the ANSI code page that
    # Windows' Python reads `sys.stdin` in).
    call = json.load(sys.stdin.buffer)
    try:
        answer = {"output": weather(str(call["arguments"].get("city", ""))), "is_error": False}
    except LookupError as e:
        answer = {"output": {"error": str(e)}, "is_error": True, "error": str(e)}
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    exec_once() if sys.argv[1:] == ["--exec"] else serve()
