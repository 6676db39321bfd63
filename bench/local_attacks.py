#!/usr/bin/env python3
"""Issue 48's attacks by a local process on a running sidecar, at full size.

Run by bench/local_attacks.sh, which starts the sidecar (and the stand-in
main_server and the handler) and passes their addresses. Each attack is
bounded in connections and time, stays on loopback, and prints one JSON
line of figures. Standard library only (asyncio streams).

    local_attacks.py ATTACK --callback HOST:PORT --admin HOST:PORT --pid PID
        --echo-url URL --slow-url URL

ATTACK: tokenless | wrong_token_bodies | burst | admin_flood
"""

import argparse
import asyncio
import json
import time

HEAD_BUDGET = 30.0  # a real call's own timeout, as main_server's default


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    import os
    return len(os.listdir(f"/proc/{pid}/fd"))


async def sample_rss(pid, stop, out):
    while not stop.is_set():
        out["peak_rss_kib"] = max(out.get("peak_rss_kib", 0), rss_kib(pid))
        try:
            out["peak_fds"] = max(out.get("peak_fds", 0), fds(pid))
        except OSError:
            pass
        await asyncio.sleep(0.1)


def split(addr):
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def call_body(tool, args, call_id="call_bench_1"):
    return json.dumps({
        "name": tool,
        "arguments": args,
        "call_id": call_id,
        "raw_arguments": json.dumps(args),
    }).encode()


async def http(addr, method, path, body=b"", timeout=HEAD_BUDGET):
    """One request on a fresh connection: (status, body), or the failure
    as a string: 'closed' (no answer), 'timeout', 'refused'."""
    host, port = split(addr)
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except asyncio.TimeoutError:
        return "connect_timeout"
    except OSError as e:
        return f"connect_error:{e.errno}"
    try:
        head = (f"{method} {path} HTTP/1.1\r\nhost: {host}:{port}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
                "connection: close\r\n\r\n").encode()
        w.write(head + body)
        await w.drain()
        data = await asyncio.wait_for(r.read(), timeout)
    except asyncio.TimeoutError:
        return "timeout"
    except (ConnectionError, OSError):
        return "closed"
    finally:
        w.close()
    if not data:
        return "closed"
    head, _, rest = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return "garbled"
    return status, rest


def verdict(res, word):
    """'ok' for a 200 whose output echoes `word`, else the failure."""
    if isinstance(res, str):
        return res
    status, body = res
    if status == 200 and word.encode() in body:
        return "ok"
    if status == 503 and b"SIDECAR_BUSY" in body:
        return "503_envelope"
    return f"http_{status}"


async def real_calls(a, n, gap, results):
    """`n` real calls, one every `gap` seconds, each on a fresh connection."""
    tasks = []
    for i in range(n):
        word = f"real-{i}"
        body = call_body("echo", {"word": word})
        async def one(body=body, word=word):
            t0 = time.monotonic()
            res = await http(a.callback, "POST", a.echo_path, body)
            results.append((verdict(res, word), time.monotonic() - t0))
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(gap)
    await asyncio.gather(*tasks)


def summarise(results):
    out = {}
    for v, _ in results:
        out[v] = out.get(v, 0) + 1
    waits = sorted(t for _, t in results)
    if waits:
        out["max_s"] = round(waits[-1], 2)
        out["p50_s"] = round(waits[len(waits) // 2], 3)
    return out


async def hold_open(addr, payload, held, stop, limit, opened):
    """Opens connections sending `payload` and keeps them, at most
    `limit` at a time (the oldest dropped), until `stop`."""
    host, port = split(addr)
    while not stop.is_set():
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
            w.write(payload)
            opened[0] += 1
        except (asyncio.TimeoutError, OSError):
            await asyncio.sleep(0.01)
            continue
        held.append(w)
        if len(held) > limit:
            held.pop(0).close()
        await asyncio.sleep(0)


async def tokenless(a):
    """Point 1: `POST /cb/anything/x`, Content-Length 1000, no body, from
    1,024 connections (re-opened as the sidecar closes them), while 70
    real calls are made."""
    payload = (b"POST /cb/anything/x HTTP/1.1\r\nhost: x\r\n"
               b"content-length: 1000\r\n\r\n")
    stop, held, opened = asyncio.Event(), [], [0]
    stats = {}
    sampler = asyncio.create_task(sample_rss(a.pid, stop, stats))
    flooders = [asyncio.create_task(hold_open(a.callback, payload, held, stop, a.connections, opened))
                for _ in range(8)]
    await asyncio.sleep(3)  # the bound full
    results = []
    await real_calls(a, 70, 0.1, results)
    stop.set()
    await asyncio.gather(*flooders, sampler)
    for w in held:
        w.close()
    return {"attack": "tokenless", "attacker_connections_opened": opened[0],
            "real_calls": summarise(results), **stats}


async def wrong_token_bodies(a):
    """Point 1: 1,000 connections each announcing 1,048,576 bytes for a
    wrong token and sending 1,040,000 of them; the sidecar's RSS."""
    declared, sent = 1_048_576, 1_040_000
    head = (f"POST /cb/00000000000000000000000000000000/echo HTTP/1.1\r\nhost: x\r\n"
            f"content-length: {declared}\r\n\r\n").encode()
    chunk = b"x" * 65536
    stop = asyncio.Event()
    stats = {"rss_before_kib": rss_kib(a.pid)}
    sampler = asyncio.create_task(sample_rss(a.pid, stop, stats))
    host, port = split(a.callback)
    sem = asyncio.Semaphore(200)
    writers = []

    async def one():
        async with sem:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
            except (asyncio.TimeoutError, OSError):
                return "connect_failed"
            writers.append(w)
            try:
                w.write(head)
                left = sent
                while left > 0:
                    w.write(chunk[: min(left, len(chunk))])
                    left -= min(left, len(chunk))
                    await asyncio.wait_for(w.drain(), 5)
                return "sent"
            except (asyncio.TimeoutError, ConnectionError, OSError):
                return "cut"

    attackers = [asyncio.create_task(one()) for _ in range(1000)]
    results = []
    real = asyncio.create_task(real_calls(a, 30, 0.2, results))
    outcomes = await asyncio.gather(*attackers)
    await real
    await asyncio.sleep(1)
    stop.set()
    await sampler
    for w in writers:
        w.close()
    counts = {}
    for o in outcomes:
        counts[o] = counts.get(o, 0) + 1
    return {"attack": "wrong_token_bodies", "attackers": counts,
            "real_calls": summarise(results), **stats}


async def burst(a):
    """Point 2: 2,000 simultaneous calls to a handler that takes 5 s."""
    stop = asyncio.Event()
    stats = {}
    sampler = asyncio.create_task(sample_rss(a.pid, stop, stats))
    body = call_body("slow", {})
    t0 = time.monotonic()

    async def one():
        t = time.monotonic()
        res = await http(a.callback, "POST", a.slow_path, body, timeout=60)
        return verdict(res, "slow but here"), time.monotonic() - t

    results = await asyncio.gather(*[one() for _ in range(a.burst)])
    stop.set()
    await sampler
    return {"attack": "burst", "calls": a.burst, "answers": summarise(results),
            "wall_s": round(time.monotonic() - t0, 1), **stats}


async def admin_flood(a):
    """Point 3: 20,000 idle connections to the admin port, while /healthz
    and real calls are asked for."""
    host, port = split(a.admin)
    stop = asyncio.Event()
    stats = {}
    sampler = asyncio.create_task(sample_rss(a.pid, stop, stats))
    held, failed = [], [0]
    sem = asyncio.Semaphore(500)

    async def one():
        async with sem:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
                held.append(w)
            except (asyncio.TimeoutError, OSError):
                failed[0] += 1

    flood = asyncio.gather(*[one() for _ in range(a.flood)])
    await asyncio.sleep(5)
    healthz, results = [], []
    for _ in range(10):
        t = time.monotonic()
        res = await http(a.admin, "GET", "/healthz", timeout=10)
        healthz.append((verdict(res, "ok"), time.monotonic() - t))
    await real_calls(a, 30, 0.1, results)
    await flood
    stop.set()
    await sampler
    for w in held:
        w.close()
    return {"attack": "admin_flood", "flood": a.flood, "flood_connect_failures": failed[0],
            "healthz": summarise(healthz), "real_calls": summarise(results), **stats}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("attack")
    p.add_argument("--callback", required=True)
    p.add_argument("--admin", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--echo-path", required=True)
    p.add_argument("--slow-path", required=True)
    p.add_argument("--connections", type=int, default=1024)
    p.add_argument("--burst", type=int, default=2000)
    p.add_argument("--flood", type=int, default=20000)
    a = p.parse_args()
    fn = {"tokenless": tokenless, "wrong_token_bodies": wrong_token_bodies,
          "burst": burst, "admin_flood": admin_flood}[a.attack]
    print(json.dumps(asyncio.run(fn(a))), flush=True)


if __name__ == "__main__":
    main()
