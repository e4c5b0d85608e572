"""The report in headless Chromium: loads with no request leaving the page, sections visible, scripts
work, injected markup inert; screenshots (light and dark) saved under test-artifacts/.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: NUL-separated
JSON on fds 3/4), so no driver package is needed. Needs the Debian package `chromium`
(`apt-get install -y chromium`); skipped with that reason when it is absent.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from PIL import Image

from evalsuite.report import build_report
from evalsuite.store import Store
from evalsuite.types import MetricValue, TaskResult

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("EVALSUITE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe"]
PAYLOAD = ('<script>document.body.dataset.pwned="script"</script>'
           '<img src=x onerror="document.body.dataset.pwned=\'onerror\'"> "quoted" & done')


class Chromium:
    """A minimal DevTools-protocol client over Chromium's debugging pipe."""

    def __init__(self, profile: Path):
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        def _pipe_fds():    # in the child: its end of the pipes as fds 3 (commands) and 4 (replies)
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 100)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 100)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            pass_fds=(3, 4), preexec_fn=_pipe_fds)
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id, self.events, self._replies = 0, [], {}
        self._inbox: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._proc.stderr.read, daemon=True).start()   # keep stderr drained

    def _read(self):
        buf = b""
        while chunk := os.read(self._r, 1 << 16):
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            for m in msgs:
                self._inbox.put(json.loads(m))

    def _pump(self, timeout: float):
        msg = self._inbox.get(timeout=timeout)
        if "id" in msg:
            self._replies[msg["id"]] = msg
        else:
            self.events.append(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout=30.0) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while self._next_id not in self._replies:
            self._pump(timeout)
        reply = self._replies.pop(self._next_id)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply["result"]

    def wait_event(self, method: str, timeout=30.0) -> dict:
        while True:
            for e in self.events:
                if e["method"] == method:
                    self.events.remove(e)
                    return e
            self._pump(timeout)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001 - closing a browser that already went is fine
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def _store(tmp_path: Path) -> Store:
    """Two iterations, eight images; iteration 1's caption of image 0 carries the payload."""
    store = Store(tmp_path / "store")
    for it in range(2):
        chair, rel = [], []
        for i in range(8):
            img = tmp_path / "img" / f"{i}.png"
            if not img.exists():
                img.parent.mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (80, 60), (30 * i, 140, 220 - 20 * i)).save(img)
            hal = it == 0 and i % 2 == 0
            answer = "A dog beside a cat on a bench." if hal else "A dog sitting on a bench."
            if it == 1 and i == 0:
                answer = f"A dog. {PAYLOAD}"
            mentioned = [{"word": "dog", "category": "dog", "position": 2, "hallucinated": False}]
            if hal:
                mentioned.append({"word": "cat", "category": "cat", "position": answer.index("cat"),
                                  "hallucinated": True})
            base = {"key": f"val:{i}", "image_id": i, "image": str(img), "prompt": "Describe the image.",
                    "answer": answer}
            chair.append({**base, "mentioned": mentioned, "hallucinated": ["cat"] if hal else [],
                          "gt": ["dog", "bench"], "chair_s": int(hal)})
            rel.append({**base, "relevance": 0.5 + 0.1 * it + 0.02 * i})
        cs = 0.5 if it == 0 else 0.1
        pairs = [{"id": f"p{j}", "image": str(tmp_path / "img" / "0.png"), "prompt": "Describe.",
                  "chosen": "A dog.", "rejected": "A cat.", "chosen_reward": 1.0 + 0.1 * j + it,
                  "rejected_reward": 0.4 + 0.05 * j, "chosen_relevance": 0.6 + 0.03 * j,
                  "rejected_relevance": 0.45 + 0.02 * j} for j in range(6)]
        store.write_run(
            {"ckpt": f"/ckpts/iter{it}", "ckpt_hash": f"{it:064x}", "iteration": it,
             "method": "base" if it == 0 else "csr", "config": {"beta": 0.1, "caption": PAYLOAD}},
            [TaskResult("chair", "1", [MetricValue("CHAIRs", cs, False, 8, cs - 0.1, cs + 0.1)], samples=chair),
             TaskResult("relevance", "1", [MetricValue("relevance_mean", 0.57 + 0.1 * it, True, 8, 0.5, 0.7)],
                        samples=rel),
             TaskResult("csr_pairs", "1", [MetricValue("chosen_reward_mean", 1.25 + it, True, 6),
                                           MetricValue("rejected_reward_mean", 0.525, True, 6),
                                           MetricValue("reward_gap", 0.725 + it, True, 6)], samples=pairs)])
    return store


def _eval(cr: Chromium, session: str, expr: str):
    res = cr.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
    assert "exceptionDetails" not in res, res
    return res["result"].get("value")


def _open(cr: Chromium, url: str, scheme: str) -> str:
    target = cr.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = cr.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Network", "Runtime", "Log"):
        cr.send(f"{domain}.enable", {}, session)
    cr.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}, session)
    cr.send("Emulation.setDeviceMetricsOverride",
            {"width": 1360, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session)
    cr.send("Page.navigate", {"url": url}, session)
    cr.wait_event("Page.loadEventFired")
    return session


def _screenshot(cr: Chromium, session: str, path: Path) -> None:
    height = min(int(_eval(cr, session, "document.documentElement.scrollHeight")), 7000)
    cr.send("Emulation.setDeviceMetricsOverride",
            {"width": 1360, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
    data = cr.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
    path.write_bytes(base64.b64decode(data))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_report_in_headless_chromium(tmp_path):
    html_path = build_report(_store(tmp_path), tmp_path / "reports" / "browser", page_size=3)
    url = html_path.resolve().as_uri()
    ARTIFACTS.mkdir(exist_ok=True)
    cr = Chromium(tmp_path / "profile")
    try:
        session = _open(cr, url, "light")
        # every request the page made: the document itself and data: URIs, nothing failed
        requested = [e["params"]["request"]["url"] for e in cr.events if e["method"] == "Network.requestWillBeSent"]
        failed = [e["params"] for e in cr.events if e["method"] == "Network.loadingFailed"]
        assert requested and all(u == url or u.startswith("data:") for u in requested), requested
        assert failed == []
        problems = [e for e in cr.events if e["method"] in ("Runtime.exceptionThrown", "Log.entryAdded")
                    and (e["method"] != "Log.entryAdded" or e["params"]["entry"]["level"] == "error")]
        assert problems == []
        assert _eval(cr, session, "document.documentElement.dataset.jsReady") == "1"
        # the main sections are laid out and visible
        boxes = _eval(cr, session, """JSON.stringify([...document.querySelectorAll('main > section')].map(s => {
            const r = s.getBoundingClientRect(), st = getComputedStyle(s);
            return [s.id, r.height, st.display, st.visibility, s.querySelector('h2').textContent]; }))""")
        boxes = json.loads(boxes)
        assert [b[0] for b in boxes] == ["summary", "iterations", "csr", "relevance", "samples", "provenance"]
        assert all(h > 60 and d != "none" and v == "visible" for _, h, d, v, _ in boxes), boxes
        assert _eval(cr, session, "document.querySelectorAll('svg.plot').length") == 2 + 2 + 2
        assert _eval(cr, session, "[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        # the payload is text, not markup: nothing ran, no element came from it
        assert _eval(cr, session, "document.body.dataset.pwned === undefined")
        assert _eval(cr, session, "document.scripts.length") == 1
        assert _eval(cr, session, "document.querySelectorAll('img[src=\"x\"], [onerror]').length") == 0
        assert _eval(cr, session, f"document.body.textContent.includes({json.dumps(PAYLOAD)})")
        # sorting and paging work
        first = "document.querySelector('#summary-table tbody tr td').textContent.trim()"
        before = _eval(cr, session, first)
        _eval(cr, session, "document.querySelector('#summary-table th').click()")
        _eval(cr, session, "document.querySelector('#summary-table th').click()")
        assert _eval(cr, session, first) != before
        _eval(cr, session, "document.querySelector('.pager [data-step=\"1\"]').click()")
        assert _eval(cr, session, "[...document.querySelectorAll('.page')].map(p => p.hidden)") == [True, False, True]
        _eval(cr, session, "window.scrollTo(0, 0); document.querySelector('.pager [data-step=\"-1\"]').click()")
        _screenshot(cr, session, ARTIFACTS / "report_light.png")
        dark = _open(cr, url, "dark")
        bg = _eval(cr, dark, "getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(20, 24, 29)", bg      # the dark palette's --bg
        _screenshot(cr, dark, ARTIFACTS / "report_dark.png")
    finally:
        cr.close()
    for name in ("report_light.png", "report_dark.png"):
        with Image.open(ARTIFACTS / name) as im:
            assert im.width == 1360 and im.height > 1500
            assert len(set(im.convert("L").resize((64, 64)).tobytes())) > 20    # not a blank page
