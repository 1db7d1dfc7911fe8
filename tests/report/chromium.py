"""Load a page in headless Chromium over the DevTools protocol: console errors, broken images, screenshot."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import websocket  # websocket-client

_LISTENING = re.compile(r"DevTools listening on (ws://[^\s]+)")


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def open_browser(profile: Path) -> "Browser":
    """A headless Chromium for a test: the test is skipped where none is installed, and fails in CI."""
    import os

    import pytest

    binary = chromium_binary()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI installs it in .ci/run: apt-get install -y chromium)")
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    return Browser(profile, binary)


class Browser:
    def __init__(self, profile: Path, binary: str) -> None:
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={profile}",
             "--window-size=1200,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        self.port = None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            match = _LISTENING.search(line or "")
            if match:
                self.port = int(match.group(1).split(":")[2].split("/")[0])
                break
            if self.proc.poll() is not None:
                break
        if self.port is None:
            self.close()
            raise RuntimeError("chromium did not open its DevTools port")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def text_when(self, url: str, ready, timeout: float = 60.0, screenshot: Path | None = None) -> str:
        """Open ``url`` (a page that renders after load, such as a single-page app) and return its text
        once ``ready(text)`` holds, or the last text seen when ``timeout`` runs out."""
        ws = self._open_tab(timeout)
        send = self._sender(ws)
        try:
            send("Page.navigate", url=url)
            deadline, text = time.time() + timeout, ""
            while time.time() < deadline:
                time.sleep(1.0)
                text = send("Runtime.evaluate", returnByValue=True,
                            expression="document.body ? document.body.innerText : ''")["result"]["result"]["value"]
                if ready(text):
                    break
            if screenshot is not None:
                shot = send("Page.captureScreenshot", format="png")["result"]["data"]
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                screenshot.write_bytes(base64.b64decode(shot))
        finally:
            ws.close()
        return text

    def check(self, url: str, screenshot: Path, timeout: float = 30.0) -> dict:
        """Open ``url``; return console errors, failed loads and broken images; write a full-page PNG."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        target = json.loads(urllib.request.urlopen(request, timeout=10).read())
        ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=timeout)
        counter = iter(range(1, 10_000))
        errors: list[str] = []

        def send(method: str, **params):
            ident = next(counter)
            ws.send(json.dumps({"id": ident, "method": method, "params": params}))
            return wait(lambda m: m.get("id") == ident)

        def wait(done):
            deadline = time.time() + timeout
            while time.time() < deadline:
                message = json.loads(ws.recv())
                method = message.get("method")
                if method == "Runtime.consoleAPICalled" and message["params"]["type"] in ("error", "assert"):
                    errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                          for a in message["params"]["args"]))
                elif method == "Runtime.exceptionThrown":
                    errors.append("exception: " + message["params"]["exceptionDetails"].get("text", ""))
                elif method == "Log.entryAdded" and message["params"]["entry"]["level"] == "error":
                    entry = message["params"]["entry"]
                    errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
                elif method == "Network.loadingFailed" and not message["params"].get("canceled"):
                    errors.append(f"load failed: {message['params'].get('errorText')}")
                if done(message):
                    return message
            raise TimeoutError(f"no answer from chromium within {timeout}s for {url}")

        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                send(f"{domain}.enable")
            send("Page.navigate", url=url)
            wait(lambda m: m.get("method") == "Page.loadEventFired")
            broken = send("Runtime.evaluate", returnByValue=True, expression=(
                "Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute('src'))"
            ))["result"]["result"]["value"]
            n_images = send("Runtime.evaluate", returnByValue=True,
                            expression="document.images.length")["result"]["result"]["value"]
            text = send("Runtime.evaluate", returnByValue=True,
                        expression="document.body.innerText")["result"]["result"]["value"]
            shot = send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["result"]["data"]
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot))
        finally:
            ws.close()
        return {"errors": errors, "broken_images": broken, "n_images": n_images, "text": text}

    def _open_tab(self, timeout: float):
        """A new tab's DevTools connection."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        target = json.loads(urllib.request.urlopen(request, timeout=10).read())
        return websocket.create_connection(target["webSocketDebuggerUrl"], timeout=timeout)

    @staticmethod
    def _sender(ws, on_event=None):
        """``send(method, **params)``: the command's answer; every other message on the way to ``on_event``."""
        counter = iter(range(1, 10_000))

        def send(method: str, **params):
            ident = next(counter)
            ws.send(json.dumps({"id": ident, "method": method, "params": params}))
            while True:
                message = json.loads(ws.recv())
                if message.get("id") == ident:
                    return message
                if on_event is not None:
                    on_event(message)
        return send

    def horizontal_overflow(self, url: str, width: int = 1400, height: int = 900, timeout: float = 30.0) -> dict:
        """Open ``url`` in a ``width`` x ``height`` window; return how far the page scrolls sideways
        (``overflow``: document width minus window width, 0 when it does not) and the elements reaching past
        the window's right edge (tag, class, right edge), the ones to look at when it does."""
        ws = self._open_tab(timeout)
        loaded: list[bool] = []
        send = self._sender(ws, lambda m: loaded.append(True) if m.get("method") == "Page.loadEventFired" else None)
        try:
            send("Page.enable")
            send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
            send("Page.navigate", url=url)
            deadline = time.time() + timeout
            while not loaded and time.time() < deadline:
                if json.loads(ws.recv()).get("method") == "Page.loadEventFired":
                    loaded.append(True)
            found = send("Runtime.evaluate", returnByValue=True, expression=(
                "(() => { const w = document.documentElement.clientWidth;"
                " const wide = Array.from(document.querySelectorAll('body *'))"
                "   .filter(e => e.getBoundingClientRect().right > w + 1)"
                "   .map(e => `${e.tagName.toLowerCase()}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`);"
                " return {window: w, document: document.documentElement.scrollWidth, wide: wide.slice(0, 10)}; })()"
            ))["result"]["result"]["value"]
        finally:
            ws.close()
        return {"overflow": max(0, found["document"] - found["window"]), "window": found["window"], "wide": found["wide"]}

    def evaluate_when(self, url: str, expression: str, ready, timeout: float = 60.0) -> tuple:
        """Open ``url``; once ``ready(value)`` holds for the value of the JavaScript ``expression`` (or
        ``timeout`` runs out), return ``(value, requested)``: that value and the URL of every request the page
        made (every one, answered or not: a page meant to work offline must make none to the network)."""
        ws = self._open_tab(timeout)
        requested: list[str] = []

        def on_event(message: dict) -> None:
            if message.get("method") == "Network.requestWillBeSent":
                requested.append(message["params"]["request"]["url"])

        send = self._sender(ws, on_event)
        try:
            send("Network.enable")
            send("Page.navigate", url=url)
            deadline, value = time.time() + timeout, None
            while time.time() < deadline:
                time.sleep(0.5)
                value = send("Runtime.evaluate", returnByValue=True, expression=expression)["result"]["result"].get("value")
                if ready(value):
                    break
        finally:
            ws.close()
        return value, requested
