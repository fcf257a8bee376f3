"""Headless Chromium (Debian's `chromium`, `make browser`) driven over the Chrome DevTools
protocol with `websockets`: no driver binary, nothing downloaded at run time.

Clicks and typing go through the protocol's input events (a real mouse click at the element's
centre, text inserted as the keyboard would), so an element hidden or covered cannot be clicked
by accident. JavaScript exceptions and console errors of the page are collected in
``Page.errors`` so that a test can insist on none."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect


def chromium_path() -> str | None:
    """Debian's Chromium, else any `chromium` on PATH; None when there is none."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


class CDPError(RuntimeError):
    pass


class _Connection:
    """One DevTools websocket: numbered commands, events kept aside until read."""

    def __init__(self, url: str) -> None:
        # Entered as a context manager, as websockets wants its connections used.
        self._stack = contextlib.ExitStack()
        self.ws: ClientConnection = self._stack.enter_context(
            connect(url, max_size=None, open_timeout=20)
        )
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        command_id = self.next_id
        self.ws.send(json.dumps({"id": command_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError(f"{method}: no answer in {timeout} s")
            message = json.loads(self.ws.recv(timeout=left))
            if message.get("id") == command_id:
                if "error" in message:
                    raise CDPError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stack.close()


class Page:
    """The browser's one tab."""

    def __init__(self, connection: _Connection) -> None:
        self.cdp = connection
        self.cdp.send("Page.enable")
        self.cdp.send("Runtime.enable")
        self.cdp.send("Log.enable")

    @property
    def errors(self) -> list[str]:
        """The page's uncaught exceptions, console.error calls and browser-reported errors
        (a content security policy violation, say), in order. Failed HTTP answers the page
        handles itself (a 404 it shows as "no such user") are left out: the network layer
        logs those whatever the page does with them."""
        found = []
        for event in self.cdp.events:
            params = event.get("params", {})
            if event["method"] == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                exception = details.get("exception", {})
                found.append(exception.get("description") or details.get("text", "exception"))
            elif event["method"] == "Runtime.consoleAPICalled" and params.get("type") == "error":
                args = params.get("args", [])
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in args))
            elif event["method"] == "Log.entryAdded":
                entry = params.get("entry", {})
                if entry.get("level") == "error" and entry.get("source") != "network":
                    found.append(f"{entry.get('source')}: {entry.get('text')}")
        return found

    def goto(self, url: str, timeout: float = 20) -> None:
        """Load ``url`` as a new document (the same URL again reloads it) and wait for it."""
        self.eval("window.__replaced = true")
        answer = self.cdp.send("Page.navigate", url=url)
        if answer.get("errorText"):
            raise CDPError(f"{url}: {answer['errorText']}")
        self.wait_for("!window.__replaced && document.readyState === 'complete'", timeout)

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        answer = self.cdp.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise CDPError(f"{expression!r}: {text}")
        return answer.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 10) -> None:
        """Until the expression is truthy (as JavaScript has it: an element is)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.eval(f"Boolean({expression})"):
                return
            if time.monotonic() > deadline:
                body = self.eval("document.body ? document.body.innerText : ''")
                raise AssertionError(f"not true after {timeout} s: {expression}\npage: {body}")
            time.sleep(0.05)

    def visible(self, selector: str) -> bool:
        return bool(
            self.eval(
                f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                " if (!e) return false; const r = e.getBoundingClientRect();"
                " return r.width > 0 && r.height > 0"
                " && getComputedStyle(e).visibility !== 'hidden'; })()"
            )
        )

    def wait_visible(self, selector: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not self.visible(selector):
            if time.monotonic() > deadline:
                body = self.eval("document.body ? document.body.innerText : ''")
                raise AssertionError(f"{selector} not visible after {timeout} s\npage: {body}")
            time.sleep(0.05)

    def text(self, selector: str) -> str:
        value = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " return e ? e.innerText : null; })()"
        )
        if value is None:
            raise AssertionError(f"no element {selector}")
        return str(value)

    def click(self, selector: str, timeout: float = 10) -> None:
        """A left click at the centre of the element, as a mouse makes it: it reaches the
        element only if nothing covers it."""
        self.wait_visible(selector, timeout)
        box = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        x, y = box
        self.cdp.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.cdp.send(
                "Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1
            )

    def type(self, selector: str, text: str) -> None:
        """Focus the field by clicking it, clear it, and type ``text`` into it."""
        self.click(selector)
        self.eval(f"document.querySelector({json.dumps(selector)}).select()")
        self.cdp.send("Input.insertText", text=text)

    def screenshot(
        self, path: Path, *, full_page: bool = False, element: str | None = None, margin: int = 12
    ) -> int:
        """A PNG of the viewport, of the whole page, or of one element (with ``margin`` pixels
        around it); its size in bytes."""
        params: dict[str, Any] = {"format": "png"}
        if element is not None:
            x, y, width, height = self.eval(
                f"(() => {{ const r = document.querySelector({json.dumps(element)})"
                ".getBoundingClientRect(); return [r.left + scrollX, r.top + scrollY,"
                " r.width, r.height]; })()"
            )
            clip = {
                "x": max(0, x - margin),
                "y": max(0, y - margin),
                "width": width + 2 * margin,
                "height": height + 2 * margin,
            }
            params |= {"captureBeyondViewport": True, "clip": clip | {"scale": 1}}
        elif full_page:
            metrics = self.cdp.send("Page.getLayoutMetrics")
            size = metrics["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"]}
            params |= {"captureBeyondViewport": True, "clip": clip | {"scale": 1}}
        data = base64.b64decode(self.cdp.send("Page.captureScreenshot", **params)["data"])
        path.write_bytes(data)
        return len(data)


class Browser:
    """A headless Chromium with its own throw-away profile and one tab."""

    def __init__(self, *, width: int = 1280, height: int = 900) -> None:
        executable = chromium_path()
        if executable is None:
            raise RuntimeError("no Chromium: `make browser` installs Debian's chromium")
        self.profile = Path(tempfile.mkdtemp(prefix="tailor-chromium-"))
        self.downloads = self.profile / "downloads"
        self.downloads.mkdir()
        args = [
            executable,
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}",
        ]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium's sandbox refuses to run as root
        args.append("about:blank")
        self.log = (self.profile / "chromium.log").open("wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            port, browser_path = self._devtools_address()
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            page_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            self.browser = _Connection(f"ws://127.0.0.1:{port}{browser_path}")
            self.browser.send(
                "Browser.setDownloadBehavior",
                behavior="allow",
                downloadPath=str(self.downloads),
                eventsEnabled=True,
            )
            self.page = Page(_Connection(page_url))
        except BaseException:
            self.close()
            raise

    def _devtools_address(self, timeout: float = 30) -> tuple[int, str]:
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited: {self._log_tail()}")
            try:
                lines = active.read_text().split()
            except OSError:
                lines = []
            if len(lines) >= 2:
                return int(lines[0]), lines[1]
            time.sleep(0.05)
        raise RuntimeError(f"chromium gave no DevTools port: {self._log_tail()}")

    def _log_tail(self) -> str:
        self.log.flush()
        return (self.profile / "chromium.log").read_text(errors="replace")[-3000:]

    def download(self, name: str, timeout: float = 10) -> Path:
        """A finished download of that name."""
        path = self.downloads / name
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            partial = list(self.downloads.glob("*.crdownload"))
            if path.is_file() and not partial:
                return path
            time.sleep(0.05)
        raise AssertionError(f"no download {name}: {sorted(os.listdir(self.downloads))}")

    def close(self) -> None:
        for name in ("page", "browser"):
            connection = getattr(self, name, None)
            if isinstance(connection, Page):
                connection.cdp.close()
            elif isinstance(connection, _Connection):
                connection.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


@contextlib.contextmanager
def browser(**kwargs: Any) -> Iterator[Browser]:
    b = Browser(**kwargs)
    try:
        yield b
    finally:
        b.close()
