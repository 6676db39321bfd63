#!/usr/bin/env python3
"""An http handler for neko-sidecar: the `weather` tool, stdlib only.

The sidecar POSTs the callback JSON main_server sent it, unchanged:
  {"name": "weather", "arguments": {"city": "Tokyo"}, "call_id": "...", "raw_arguments": "..."}
and relays whatever this answers. Answer an envelope:
  {"output": ANY_JSON, "is_error": false}
  {"output": {"error": MSG}, "is_error": true, "error": MSG}
(plain JSON or text works too; the sidecar wraps it as the output).
main_server shows the model `output` alone (`is_error` and `error` go to its
logs), so on failure the sentence for the model goes in `output`.

Run: python3 weather_http.py [PORT]   (default 9876; 0 picks a free port)
It prints "listening on 127.0.0.1:PORT" once ready.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WEATHER = {"tokyo": (22, "sunny"), "osaka": (24, "cloudy"), "sapporo": (9, "snow")}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        call = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        city = str(call["arguments"].get("city", ""))
        if city.lower() in WEATHER:
            temp, sky = WEATHER[city.lower()]
            answer = {"output": {"city": city, "temp_c": temp, "weather": sky}, "is_error": False}
        else:
            known = ", ".join(c.title() for c in WEATHER)
            message = f"unknown city {city!r}; known cities: {known}"
            answer = {"output": {"error": message}, "is_error": True, "error": message}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # keep stdout for the ready line
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 9876), Handler)
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
