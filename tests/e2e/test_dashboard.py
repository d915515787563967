"""The RM's dashboard in a real browser: headless Chromium (Debian's
chromium-headless-shell) loads the page from a live cluster, and the open page shows a
worker going down without a reload. The browser is driven over the DevTools protocol on
a pipe (--remote-debugging-pipe), so no port is opened and nothing beyond the standard
library is needed."""

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from conftest import dashboard_url, start_rm

CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium installed "
                                "(apt-get install chromium-headless-shell)")


class Browser:
    """One headless Chromium, spoken to over fd 3 (commands) and fd 4 (answers)."""

    def __init__(self, url: str, profile: str):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds():  # in the child: the pipe ends at fds 3 and 4
            r, w = os.dup(to_browser_r), os.dup(from_browser_w)  # clear of 3 and 4
            os.dup2(r, 3)
            os.dup2(w, 4)

        assert CHROMIUM is not None  # the module is skipped without it
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--remote-debugging-pipe", "--no-sandbox",
             "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}", url],
            # Not pass_fds: the child closes unlisted fds after wire_fds, 3 and 4 too.
            close_fds=False, preexec_fn=wire_fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._session = None
        target = self._page_target(url)
        self._session = self.call("Target.attachToTarget",
                                  {"targetId": target, "flatten": True})["sessionId"]

    def _page_target(self, url: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for info in self.call("Target.getTargets")["targetInfos"]:
                if info["type"] == "page":
                    return info["targetId"]
            time.sleep(0.2)
        raise AssertionError(f"Chromium opened no page for {url}")

    def call(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buffer:
                if time.monotonic() > deadline:
                    raise AssertionError(f"no answer to {method} within {timeout}s")
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise AssertionError("Chromium closed its pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise AssertionError(f"{method}: {answer['error']}")
                return answer["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        text = self.evaluate("document.body ? document.body.innerText : ''")
        raise AssertionError(f"the page never showed {what}; it shows:\n{text}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture
def browser(tmp_path):
    opened: list[Browser] = []

    def _open(url: str) -> Browser:
        opened.append(Browser(url, str(tmp_path / f"profile{len(opened)}")))
        return opened[-1]

    yield _open
    for b in opened:
        b.close()


def test_the_dashboard_shows_a_live_cluster_and_a_worker_going_down(spawn, plugin, browser):
    rm = start_rm(spawn, "--metrics_port=0")
    dashboard = dashboard_url(rm)
    workers = []
    for index in range(2):
        worker = spawn("worker", f"--resource_manager_address={rm.address}",
                       "--server_port=0", f"--slice_index={index}", f"--pjrt_plugin={plugin}",
                       "--cpu_device_count=2")
        worker.wait_for("registered with the resource manager")
        workers.append(worker)
    # What the page polls is the RM's view, with each host's load.
    with urllib.request.urlopen(f"{dashboard}/api/status", timeout=10) as r:
        status = json.load(r)
    assert len(status["fleet"]["slices"]) == 2 and len(status["stats"]) == 2, status

    page = browser(f"{dashboard}/")
    page.wait_for("document.getElementById('summary').textContent.includes("
                  "'2 slices, 2 hosts (2 healthy), 4 devices')", "the live cluster")
    assert page.evaluate("document.querySelectorAll('tr[data-health=healthy]').length") == 2
    # The RM's own memory (no proxy reports here).
    assert status["fleet"]["rm_pid"] == str(rm.proc.pid), status["fleet"]
    page.wait_for("document.querySelector('#processes tbody').innerText"
                  ".includes('resource manager')", "the RM's row")

    workers[1].stop(signal.SIGKILL)
    # The same page, not reloaded, turns the host red once the RM declares it dead.
    page.wait_for("document.querySelector('tr[data-host=\"1/0\"]')"
                  ".getAttribute('data-health') === 'down'", "slice 1 down")
    assert "DOWN" in page.evaluate("document.querySelector('tr[data-host=\"1/0\"]').innerText")
    assert page.evaluate("document.getElementById('summary').textContent").startswith(
        "2 slices, 2 hosts (1 healthy)")


def test_the_dashboard_escapes_what_comes_from_the_network(spawn, plugin, browser):
    """A worker's address and a session's owner are shown as text, never as markup."""
    rm = start_rm(spawn, "--metrics_port=0")
    dashboard = dashboard_url(rm)
    worker = spawn("worker", f"--resource_manager_address={rm.address}",
                   "--server_port=0", "--slice_index=0", f"--pjrt_plugin={plugin}",
                   "--cpu_device_count=1", "--advertise_host=<img src=x onerror=alert(1)>")
    worker.wait_for("registered with the resource manager")
    page = browser(f"{dashboard}/")
    page.wait_for("document.querySelectorAll('#hosts tbody tr').length === 1", "the host")
    assert page.evaluate("document.querySelectorAll('#hosts img').length") == 0
    assert "<img" in page.evaluate("document.querySelector('#hosts tbody').innerText")
