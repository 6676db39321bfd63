#!/usr/bin/env python3
"""The http handler of bench/local_attacks.sh: `POST /echo` answers the
call's `arguments` at once, `POST /slow` after 5 s. Standard library only;
one asyncio server, so 2,000 calls waiting cost no thread each.

    slow_echo.py PORT
"""

import asyncio
import json
import sys


async def serve(r, w):
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = 0
            for line in lines[1:]:
                if line.lower().startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            body = await r.readexactly(length)
            if path == "/slow":
                await asyncio.sleep(5)
                out = {"output": "slow but here", "is_error": False}
            else:
                out = {"output": json.loads(body).get("arguments"), "is_error": False}
            data = json.dumps(out).encode()
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(data)}\r\n\r\n".encode() + data)
            await w.drain()
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass
    finally:
        w.close()


async def main(port):
    server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
