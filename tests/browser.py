"""Headless Chromium driven over the DevTools protocol on a pipe, waiting in real time.

``--dump-dom`` with ``--virtual-time-budget`` is not enough for pages that draw after a frame: under
virtual time Chromium sometimes produces no frame at all, so ``requestAnimationFrame`` never fires
and the budget runs out in well under a second of real time (1 load in 4 on a quiet machine). Here
the page runs in real time and the DOM is read once an element the page (or a probe) writes exists.
"""

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)


def _above(fd: int, lowest: int) -> int:
    """``fd`` duplicated onto the lowest free descriptor >= ``lowest``; the original closed."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest)
    os.close(fd)
    return moved


class _Pipe:
    """DevTools messages on ``--remote-debugging-pipe``: JSON, each ended by a NUL byte."""

    def __init__(self, write_fd: int, read_fd: int):
        self.write_fd, self.read_fd, self.buffer, self.next_id = write_fd, read_fd, b"", 0
        self.events: list[dict] = []  # the events read while waiting for replies, in order

    def call(self, method: str, session: str | None = None, timeout: float = 30.0, **params):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self.buffer:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer to {method} in {timeout} s")
                chunk = os.read(self.read_fd, 1 << 16)
                if not chunk:
                    raise ConnectionError(f"Chromium closed the pipe before answering {method}")
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if "method" in reply:
                self.events.append(reply)
            if reply.get("id") == self.next_id:  # events are kept, other replies skipped
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})


@contextlib.contextmanager
def _browser(url: str, profile: Path, width: int, height: int, timeout: float,
             flags: tuple[str, ...]) -> Iterator[tuple[_Pipe, str]]:
    """Headless Chromium on ``url`` (``profile`` its user-data folder, ``flags`` added to the
    command line): ``(pipe, session)`` of its first page, driven over the remote-debugging pipe. The
    browser is closed cleanly on exit, so a ``--log-net-log`` among ``flags`` is complete then."""
    to_browser, from_us = os.pipe()
    to_us, from_browser = os.pipe()
    # moved to fds >= 10 first, so that putting one on 3 cannot close the other before it is on 4
    to_browser, from_browser = (_above(fd, 10) for fd in (to_browser, from_browser))
    cmd = [BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--remote-debugging-pipe", f"--user-data-dir={profile}",
           f"--window-size={width},{height}", *flags, url]
    # Chromium reads commands on fd 3 and writes replies on fd 4.
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               pass_fds=(3, 4), preexec_fn=lambda: (os.dup2(to_browser, 3),
                                                                    os.dup2(from_browser, 4)))
    os.close(to_browser), os.close(from_browser)
    pipe = _Pipe(from_us, to_us)
    try:
        deadline = time.monotonic() + timeout
        while True:
            pages = [t for t in pipe.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
            if pages:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"Chromium opened no page for {url}")
            time.sleep(0.05)
        yield pipe, pipe.call("Target.attachToTarget", targetId=pages[0]["targetId"],
                              flatten=True)["sessionId"]
    finally:
        try:
            pipe.call("Browser.close", timeout=10)
        except (ConnectionError, TimeoutError, RuntimeError, OSError):
            pass
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(from_us), os.close(to_us)


def dump_dom_when(url: str, ready_js: str, profile: Path, *, width: int = 1400,
                  timeout: float = 60.0, flags: tuple[str, ...] = ()) -> str:
    """Open ``url`` in headless Chromium (``width`` pixels wide, ``profile`` its user-data folder,
    ``flags`` added to the command line) and return the DOM's HTML once the JavaScript expression
    ``ready_js`` is true, or after ``timeout`` seconds of real time. The browser is closed cleanly,
    so a ``--log-net-log`` among ``flags`` is complete when this returns."""
    with _browser(url, profile, width, 1000, timeout, flags) as (pipe, session):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = pipe.call("Runtime.evaluate", session, expression=f"!!({ready_js})",
                              returnByValue=True)["result"].get("value")
            if ready:
                break
            time.sleep(0.1)
        return pipe.call("Runtime.evaluate", session, returnByValue=True,
                         expression="document.documentElement.outerHTML")["result"]["value"]


class Page:
    """One page of headless Chromium (see :func:`open_page`): evaluate JavaScript, wait for a
    condition, press keys; ``errors`` lists what the page reported as an error so far (uncaught
    exceptions, ``console.error``, and the browser's own error log: a script or a Worker refused)."""

    def __init__(self, pipe: _Pipe, session: str):
        self.pipe, self.session = pipe, session

    def evaluate(self, js: str):
        """The value of the JavaScript expression ``js`` (JSON-able), awaited if a promise."""
        result = self.pipe.call("Runtime.evaluate", self.session, expression=js, returnByValue=True,
                                awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{js}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, js: str, timeout: float = 30.0) -> bool:
        """Whether the JavaScript expression ``js`` became true within ``timeout`` s of real time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate(f"!!({js})"):
                return True
            time.sleep(0.1)
        return False

    def type(self, text: str) -> None:
        """Types ``text`` into the focused element, one key press (down, up) per character."""
        for char in text:
            self.pipe.call("Input.dispatchKeyEvent", self.session, type="keyDown", key=char,
                           text=char)
            self.pipe.call("Input.dispatchKeyEvent", self.session, type="keyUp", key=char)

    def screenshot(self, path: Path) -> None:
        """Writes what the window shows now to ``path`` (PNG)."""
        import base64
        data = self.pipe.call("Page.captureScreenshot", self.session, format="png")["data"]
        Path(path).write_bytes(base64.b64decode(data))

    @property
    def errors(self) -> list[str]:
        found = []
        for event in self.pipe.events:
            if event.get("sessionId") != self.session:
                continue
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(details.get("exception", {}).get("description") or details["text"])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description", "")))
                                      for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found


@contextlib.contextmanager
def open_page(url: str, profile: Path, *, width: int = 1400, height: int = 1000,
              timeout: float = 60.0, flags: tuple[str, ...] = ()) -> Iterator[Page]:
    """Headless Chromium (``width`` x ``height`` pixels, ``profile`` its user-data folder) with
    ``url`` loaded: the page starts blank, error reporting is switched on, then ``url`` is opened,
    so errors raised while it loads are in :attr:`Page.errors` too. The browser closes on exit."""
    with _browser("about:blank", profile, width, height, timeout, flags) as (pipe, session):
        for domain in ("Runtime", "Log", "Page"):
            pipe.call(f"{domain}.enable", session)
        pipe.call("Page.navigate", session, url=url)
        page = Page(pipe, session)
        if not page.wait_for(f"location.href === {json.dumps(url)} && "
                             "document.readyState === 'complete'", timeout):
            raise TimeoutError(f"{url} did not load in {timeout} s")
        yield page
