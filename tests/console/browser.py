"""A headless Chromium driven over the DevTools protocol on a pipe (no driver, no
websocket library, no browser download: Debian's ``chromium`` package).

Chromium started with ``--remote-debugging-pipe`` reads protocol messages from fd 3 and
writes them to fd 4, each a JSON object ended by a NUL byte. :class:`Browser` opens one
page target and offers the few verbs the console tests need: go to a URL, evaluate
JavaScript, fill and submit a form, wait for a condition, take a full-page screenshot;
:meth:`Browser.new_page` gives a test a page of its own without starting Chromium again.
Every call blocks (tests run it in a worker thread) and is bounded by a timeout.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["Browser", "BrowserError", "chromium_path"]

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--disable-extensions", "--no-default-browser-check",
    "--hide-scrollbars", "--mute-audio", "--window-size=1400,900",
    "--remote-debugging-pipe",
]


_TRAMPOLINE = """
import os, sys
r, w = int(sys.argv[1]), int(sys.argv[2])
os.dup2(r, 200); os.dup2(w, 201)
os.dup2(200, 3); os.dup2(201, 4)
for fd in {200, 201, r, w} - {3, 4}:
    os.close(fd)
os.execv(sys.argv[3], sys.argv[3:])
"""


#: Seconds Chromium is given to start and answer its first call.
START_TIMEOUT = 90.0


class BrowserError(Exception):
    pass


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, profile: Path, timeout: float = 15.0, flags: list[str] | None = None
                 ) -> None:
        exe = chromium_path()
        if exe is None:
            raise BrowserError("chromium is not installed")
        self.timeout = timeout
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # A tiny Python trampoline puts the pipe ends on fds 3 and 4, where Chromium
        # looks for them (via high fds, so that neither end is clobbered on the way).
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _TRAMPOLINE, str(to_child_r), str(from_child_w), exe,
             *FLAGS, *(flags or []), f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._ids = itertools.count(1)
        self._buffer = b""
        self._events: list[dict[str, Any]] = []
        self._context: str | None = None
        self._blank = False
        self.session = ""
        try:
            # its start, on a loaded machine, can take longer than a call does
            self.call("Browser.getVersion", timeout=START_TIMEOUT)
            self.new_page()
        except BaseException:
            self.close()
            raise

    def new_page(self) -> None:
        """Close the page and open a blank one in a new browser context: none of the
        previous page's cookies, storage or cache, as in a browser started anew (a test
        gets one of these; Chromium starts once for a module)."""
        if self._context is not None:
            self.call("Target.disposeBrowserContext", {"browserContextId": self._context})
            self._context = None
        self._context = self.call("Target.createBrowserContext")["browserContextId"]
        target = self.call("Target.createTarget", {"url": "about:blank",
                                                   "browserContextId": self._context})
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True})["sessionId"]
        self._events.clear()
        for domain in ("Page.enable", "Runtime.enable"):
            self.call(domain, session=self.session)
        self._blank = True

    def unused_page(self) -> None:
        """Make sure the page is one nothing was done on: the current one when that is
        so (as after the start), else a new one (:meth:`new_page`)."""
        if not self._blank:
            self.new_page()

    # ------------------------------------------------------------------ protocol

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise BrowserError("Chromium closed the DevTools pipe")
                self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, params: dict[str, Any] | None = None, *,
             session: str | None = None, timeout: float | None = None) -> dict[str, Any]:
        ident = next(self._ids)
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
            self._blank = False
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self._events.append(reply)

    def _wait_event(self, method: str, timeout: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for i, event in enumerate(self._events):
                if event["method"] == method and event.get("sessionId") == self.session:
                    del self._events[i]
                    return event
            self._events.append(self._read_message(deadline))

    # ------------------------------------------------------------------ verbs

    def goto(self, url: str) -> None:
        self._events.clear()
        result = self.call("Page.navigate", {"url": url}, session=self.session)
        if result.get("errorText"):
            raise BrowserError(f"navigating to {url}: {result['errorText']}")
        self._wait_event("Page.loadEventFired")

    def eval(self, expression: str, *, timeout: float | None = None) -> Any:
        result = self.call("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True,
        }, session=self.session, timeout=timeout)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def text(self, selector: str) -> str:
        value = self.eval(f"(document.querySelector({json.dumps(selector)}) || "
                          "{textContent: null}).textContent")
        if value is None:
            raise BrowserError(f"no element matches {selector}")
        return str(value).strip()

    def exists(self, selector: str) -> bool:
        return bool(self.eval(f"document.querySelector({json.dumps(selector)}) !== null"))

    def submit(self, form: str, fields: dict[str, str]) -> None:
        """Fill ``fields`` of the form matching ``form``, submit it as a user would (its
        submit button), and wait for the next page to load."""
        self._events.clear()
        self.eval(f"""(() => {{
            const form = document.querySelector({json.dumps(form)});
            if (!form) throw new Error("no form " + {json.dumps(form)});
            for (const [name, value] of Object.entries({json.dumps(fields)})) {{
                const field = form.elements[name];
                if (!field) throw new Error("no field " + name);
                field.value = value;
            }}
            setTimeout(() => form.requestSubmit(), 0);
        }})()""")
        self._wait_event("Page.loadEventFired")

    def click(self, selector: str) -> None:
        """Click a link or button that loads a page, and wait for it."""
        self._events.clear()
        self.eval(f"setTimeout(() => document.querySelector({json.dumps(selector)}).click(), 0)")
        self._wait_event("Page.loadEventFired")

    def wait_for(self, condition: str, timeout: float = 30.0) -> None:
        """Wait until the JavaScript ``condition`` is true in the page (checked on every
        animation frame, in the page)."""
        ms = int(timeout * 1000)
        ok = self.eval(f"""new Promise(resolve => {{
            const end = performance.now() + {ms};
            const check = () => {{
                let value = false;
                try {{ value = Boolean({condition}); }} catch (e) {{ value = false; }}
                if (value) resolve(true);
                else if (performance.now() > end) resolve(false);
                else requestAnimationFrame(check);
            }};
            check();
        }})""", timeout=timeout + 5)
        if not ok:
            raise BrowserError(f"timed out waiting for {condition}")

    def screenshot(self, path: Path) -> Path:
        metrics = self.call("Page.getLayoutMetrics", session=self.session)
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": max(size["width"], 1200),
                "height": min(size["height"], 4000), "scale": 1}
        shot = self.call("Page.captureScreenshot", {
            "format": "png", "clip": clip, "captureBeyondViewport": True,
        }, session=self.session)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        finally:
            for fd in (self._to_child, self._from_child):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
