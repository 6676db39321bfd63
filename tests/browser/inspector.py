#!/usr/bin/env python3
"""The inspector page in a real browser: headless Chromium driven over
WebDriver (Debian's `chromium` and `chromium-driver`), against
`neko-sidecar demo --keep-running` (the stand-in main_server, the example
tools, the stand-in MCP server over Streamable HTTP, the sidecar and its
admin endpoints, all in one process).

It checks that the page lists the example tools (the MCP server's too, with
its protocol), that a main_server restart shows up and clears by itself,
that a tool called through the form shows what the model reads, and that a
tool made to fail shows its reason; it saves a screenshot. WebDriver is
plain HTTP here (urllib), so the script needs nothing but python3.

Then the page with the browser set to Simplified Chinese: the page's own
words come from the catalogue (the N.E.K.O plugin's zh-CN.json, embedded),
what the model reads stays as the tool wrote it; and the recent calls show
the call the form made. A second screenshot beside the first
(SCREENSHOT with `-zh-CN` before `.png`).

Usage: inspector.py NEKO_SIDECAR_BINARY SCREENSHOT.png
`.ci/run` runs it; every wait is a condition polled against a deadline.
"""

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

WAIT = 20.0  # seconds any one condition may take
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")


def fail(msg):
    raise SystemExit(f"inspector browser test FAILED: {msg}")


def wait_for(what, check, timeout=WAIT):
    """Polls `check` until it gives a true value; fails naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except Exception as e:  # a page mid-refresh, a driver not up yet
            last = e
        time.sleep(0.1)
    fail(f"{what} did not happen within {timeout:.0f} s (last error: {last})")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    return json.loads(text) if text else None


class Browser:
    """The few WebDriver commands the test needs."""

    def __init__(self, port, profile, lang="en-US"):
        self.base = f"http://127.0.0.1:{port}"
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    # The console, to catch what the page's CSP blocked.
                    "goog:loggingPrefs": {"browser": "ALL"},
                    "goog:chromeOptions": {
                        "binary": CHROMIUM,
                        "args": [
                            "--headless",
                            "--no-sandbox",
                            "--disable-gpu",
                            "--disable-quic",
                            "--no-first-run",
                            "--disable-background-networking",
                            "--disable-component-update",
                            "--disable-sync",
                            "--disable-dev-shm-usage",
                            "--window-size=1360,1500",
                            f"--user-data-dir={profile}",
                            f"--lang={lang}",
                        ],
                        # What navigator.languages reports.
                        "prefs": {"intl.accept_languages": lang},
                    },
                }
            }
        }
        self.session = http("POST", f"{self.base}/session", caps)["value"]["sessionId"]

    def cmd(self, method, path, body=None):
        url = f"{self.base}/session/{self.session}{path}"
        if method == "POST" and body is None:
            body = {}
        return http(method, url, body)["value"]

    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def text(self, css):
        """The text of the first element matching `css`, or None."""
        return self.js(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            css,
        )

    def find(self, css):
        found = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(found.values()))

    def click(self, css):
        # The status part is replaced every second, so an element found a
        # moment ago may be gone: find and click again until it takes.
        def attempt():
            self.cmd("POST", f"/element/{self.find(css)}/click")
            return True

        wait_for(f"a click on {css}", attempt)

    def type(self, css, text):
        el = self.find(css)
        self.cmd("POST", f"/element/{el}/clear")
        self.cmd("POST", f"/element/{el}/value", {"text": text})

    def console(self):
        """The browser console's entries since the last read."""
        return self.cmd("POST", "/se/log", {"type": "browser"})

    def screenshot(self, path):
        png = base64.b64decode(self.cmd("GET", "/screenshot"))
        with open(path, "wb") as f:
            f.write(png)

    def close(self):
        try:
            http("DELETE", f"{self.base}/session/{self.session}")
        except Exception:
            pass


def start_demo(binary):
    """Starts the demo and reads what it prints until it stays up."""
    demo = subprocess.Popen(
        [binary, "demo", "--keep-running"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 120
    for line in demo.stdout:
        lines.append(line)
        if "Press Ctrl-C" in line or time.monotonic() > deadline:
            break
    out = "".join(lines)
    page = re.search(r"inspector page in a browser: (\S+)", out)
    stand_in = re.search(r"curl -s (\S+)/api/tools", out)
    config = re.search(r" status --config (\S+)", out)
    tools = re.search(r"\(manifests in (\S+)\)", out)
    if not (page and stand_in and config and tools):
        demo.kill()
        fail(f"the demo did not print the page, the stand-in, the config and the manifests:\n{out}")
    return demo, page.group(1), stand_in.group(1), config.group(1), tools.group(1)


def stop(proc, sig=signal.SIGTERM, timeout=10):
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# A tool whose schema has every kind of field the form renders, and markup in
# its texts; its handler answers with the arguments it got, so what the model
# reads is what the form sent.
FORM_CHECK = """
[[tool]]
name = "form_check"
description = "<script>window.pwned = 1</script> echoes its arguments"
timeout_seconds = 10
handler = { type = "exec", command = ["python3", "-c", 'import json,sys; b=json.load(sys.stdin); print(json.dumps({"output": b["arguments"], "is_error": False}))'] }

[tool.parameters]
type = "object"
required = ["title", "count"]

[tool.parameters.properties.title]
type = "string"
description = "<img src=x onerror=\\"window.pwned=2\\"> a title"

[tool.parameters.properties.count]
type = "integer"

[tool.parameters.properties.ratio]
type = "number"

[tool.parameters.properties.loud]
type = "boolean"

[tool.parameters.properties.mood]
type = "string"
enum = ["calm", "busy"]

[tool.parameters.properties.tags]
type = "array"
items = { type = "string" }

[tool.parameters.properties.place]
type = "object"
required = ["city"]
properties = { city = { type = "string" }, floor = { type = "integer" } }

[tool.parameters.properties.either]
oneOf = [{ type = "string" }, { type = "integer" }]
"""


def row_text(b, tool):
    return b.text(f'tr[data-tool="{tool}"]') or ""


def last_call(b, tool):
    return b.text(f'tr[data-tool="{tool}"] td.last') or ""


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    binary, shot = sys.argv[1], sys.argv[2]
    demo, page, stand_in, config, tools_dir = start_demo(binary)
    driver = browser = None
    try:
        # `status` names the page too.
        status = subprocess.run(
            [binary, "status", "--config", config], capture_output=True, text=True, timeout=30
        )
        if f"inspector page: {page}" not in status.stdout:
            fail(f"`status` does not print the page's URL {page}:\n{status.stdout}{status.stderr}")

        port = free_port()
        driver = subprocess.Popen(
            [CHROMEDRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(
            "chromedriver to answer",
            lambda: http("GET", f"http://127.0.0.1:{port}/status")["value"]["ready"],
        )
        profile = tempfile.mkdtemp(prefix="neko-inspector-chromium-")
        browser = Browser(port, profile)
        b = browser
        b.go(page)

        # 1. Every example tool, registered; the MCP server with its protocol.
        for tool in ["get_weather", "mcp_echo", "mcp_add"]:
            wait_for(f"{tool} listed as registered", lambda: "registered" in row_text(b, tool))
        wait_for(
            "every tool registered",
            lambda: re.match(r"(\d+) of \1 tools", b.text("#ms-registered") or ""),
        )
        wait_for(
            "the MCP server ready with its protocol",
            lambda: re.search(r"ready\s*\d{4}-\d\d-\d\d", b.text('tr[data-server="demo_mcp"]') or ""),
        )

        # 2. main_server restarts (forgetting every tool): the page shows it,
        # then clears by itself once the sidecar has registered them again.
        # (The demo's story has a restart of its own already.)
        def restarts():
            seen = re.search(r"(\d+) times? since start\)", b.text("#ms-restart") or "")
            return int(seen.group(1)) if seen else 0

        before = restarts()
        http("POST", f"{stand_in}/__dev/restart", {})
        wait_for("the restart to show", lambda: restarts() == before + 1)
        wait_for(
            "the page to clear after the restart",
            lambda: b.text("#banner") is None
            and re.match(r"(\d+) of \1 tools", b.text("#ms-registered") or ""),
        )

        # 3. A tool made to fail: its reason is what the model reads, and the
        # tools table shows it as the last call.
        b.click('button[data-try="get_weather"]')
        wait_for("the form for get_weather", lambda: b.text('label[for="f-city"]'))
        b.type("#f-city", "Atlantis")
        b.click("#call")
        wait_for(
            "the failure's reason",
            lambda: "known cities" in (b.text("#model-text") or "")
            and "failed" in (b.text("#result-title") or ""),
        )
        wait_for(
            "the failed call in the tools table",
            lambda: "tool_error" in last_call(b, "get_weather")
            and "known cities" in last_call(b, "get_weather"),
        )

        # 4. An MCP tool through the form.
        b.click('button[data-try="mcp_add"]')
        wait_for("the form for mcp_add", lambda: b.text('label[for="f-b"]'))
        b.type("#f-a", "2")
        b.type("#f-b", "3")
        b.click("#call")
        wait_for(
            "what the model reads from mcp_add",
            lambda: "5" in (b.text("#model-text") or "")
            and (b.text("#result-title") or "") == "What the model reads",
        )

        # 5. A schema with every kind of field: the form sends exactly the
        # JSON typed, markup in descriptions stays text, and none runs.
        with open(os.path.join(tools_dir, "form_check.toml"), "w") as f:
            f.write(FORM_CHECK)
        wait_for("form_check registered", lambda: "registered" in row_text(b, "form_check"))
        desc = b.text('tr[data-tool="form_check"] .desc') or ""
        if "<script>window.pwned = 1</script>" not in desc:
            fail(f"the description is not shown as text: {desc!r}")
        b.click('button[data-try="form_check"]')
        wait_for("the form for form_check", lambda: b.text('label[for="f-place_city"]'))
        hints = b.js(
            "return Array.from(document.querySelectorAll('#fields .hint')).map(e => e.textContent);"
        )
        if '<img src=x onerror="window.pwned=2"> a title' not in hints:
            fail(f"the field's description is not shown as text: {hints}")
        title = b.text('label[for="f-title"]') or ""
        if "*" not in title or "*" in (b.text('label[for="f-ratio"]') or ""):
            fail(f"required fields are not the starred ones: {title!r}")
        b.type("#f-title", "hi <b>")
        b.type("#f-count", "3")
        b.type("#f-ratio", "0.5")
        b.click('#f-loud option[value="true"]')
        b.click("#f-mood option[value='\"busy\"']")
        b.type("#f-tags", '["a", "b"]')
        b.type("#f-place_city", "Kyoto")
        b.type("#f-either", "7")
        b.click("#call")
        want = {
            "title": "hi <b>",
            "count": 3,
            "ratio": 0.5,
            "loud": True,
            "mood": "busy",
            "tags": ["a", "b"],
            "place": {"city": "Kyoto"},
            "either": 7,
        }

        def echoed():
            return json.loads(b.text("#model-text") or "null") == want

        wait_for(f"form_check to read back {want}", echoed)
        if b.js("return window.pwned === undefined;") is not True:
            fail("markup from a tool's description ran as script")

        # 6. A call that succeeds, for the screenshot.
        b.click('button[data-try="get_weather"]')
        wait_for("the form for get_weather", lambda: b.text('label[for="f-city"]'))
        b.type("#f-city", "Tokyo")
        b.click("#call")
        wait_for(
            "what the model reads from get_weather",
            lambda: "Tokyo" in (b.text("#model-text") or "")
            and (b.text("#result-title") or "") == "What the model reads",
        )
        wait_for(
            "the call in the tools table", lambda: last_call(b, "get_weather").startswith("ok ")
        )
        # Nothing the page needs was blocked by its own policy, and its
        # script raised nothing.
        bad = [
            e
            for e in b.console()
            if e.get("level") == "SEVERE" or "Content Security Policy" in e.get("message", "")
        ]
        if bad:
            fail(f"the browser console has errors: {bad}")
        # 7. The calls made through the form are in the recent calls, with
        # what the model read.
        calls_text = "return Array.from(document.querySelectorAll('#call-list details.call')).map(e => e.textContent);"
        wait_for(
            "the form's calls in the recent calls",
            lambda: any("get_weather" in c and "Tokyo" in c for c in b.js(calls_text))
            and any("get_weather" in c and "known cities" in c for c in b.js(calls_text)),
        )
        if b.js("return document.documentElement.lang") != "en":
            fail(f"the page's language is {b.js('return document.documentElement.lang')!r}, not en")
        if (b.text("#try h2") or "") != "Try a tool":
            fail(f"the English page's heading is {b.text('#try h2')!r}")
        b.js("window.scrollTo(0, 0)")
        b.screenshot(shot)
        browser.close()

        # 8. The same page in Simplified Chinese.
        zh_profile = tempfile.mkdtemp(prefix="neko-inspector-chromium-zh-")
        browser = Browser(port, zh_profile, lang="zh-CN")
        b = browser
        b.go(page)
        wait_for("the page in zh-CN", lambda: b.js("return document.documentElement.lang") == "zh-CN")
        wait_for("the headings from the catalogue", lambda: (b.text("#try h2") or "") == "试用工具")
        wait_for("the tools table in Chinese", lambda: "已注册" in row_text(b, "get_weather"))
        # The status part's sentences too (src/admin/i18n.rs's `sentence`),
        # their arguments (numbers, times) kept as the server wrote them.
        wait_for(
            "main_server's facts in Chinese",
            lambda: re.fullmatch(r"已注册 (\d+)/\1 个工具 · 就绪", b.text("#ms-registered") or "")
            and re.fullmatch(r"是，最近联系于 \S+", b.text("#ms-answers") or "")
            and re.fullmatch(r"\S+：已注册的工具消失了（main_server 重启或被逐出；启动以来共 \d+ 次）", b.text("#ms-restart") or ""),
        )
        for css, want in [("#calls h2", "最近的调用"), ("table#tools th", "工具"), ("#call", "调用")]:
            got = b.text(css)
            if got != want:
                fail(f"{css} reads {got!r} in zh-CN, not {want!r}")
        b.click('button[data-try="get_weather"]')
        wait_for("the form for get_weather", lambda: b.text('label[for="f-city"]'))
        b.type("#f-city", "Tokyo")
        b.click("#call")
        # What the model reads is the tool's own text, never translated.
        wait_for(
            "what the model reads, as the tool wrote it",
            lambda: "Tokyo" in (b.text("#model-text") or "")
            and (b.text("#result-title") or "") == "模型读到的内容：",
        )
        wait_for(
            "the recent calls in Chinese",
            lambda: any("模型读到的内容" in c for c in b.js(calls_text)),
        )
        bad = [
            e
            for e in b.console()
            if e.get("level") == "SEVERE" or "Content Security Policy" in e.get("message", "")
        ]
        if bad:
            fail(f"the browser console has errors in zh-CN: {bad}")
        b.js("window.scrollTo(0, 0)")
        zh_shot = re.sub(r"(\.png)?$", "-zh-CN.png", shot, count=1)
        b.screenshot(zh_shot)
        print(f"inspector browser test: ok in en and zh-CN (screenshots {shot}, {zh_shot})")
    finally:
        if browser:
            browser.close()
        if driver:
            stop(driver)
        stop(demo, signal.SIGINT)


if __name__ == "__main__":
    main()
