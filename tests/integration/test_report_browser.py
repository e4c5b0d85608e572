"""The report in headless Chromium: loads with no request leaving the page, sections visible, scripts
work, injected markup inert, and every part a researcher needs is there (headline, CIs on every delta,
per-setting POPE rows, the model's yes ratio without a direction, caption and question browsers whose
filter and search work, training curves, widest-gap pairs with images, no machine paths under
thumbnails); screenshots (light and dark, whole page) saved under test-artifacts/.

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
from tests.report_data import demo_store

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

    # a reply's wait ends a browser that hung; generous: start-up and a 16000 px screenshot, rendered in
    # software, take seconds on an idle machine and more beside the other test worker
    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout=120.0) -> dict:
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

    def wait_event(self, method: str, timeout=120.0) -> dict:
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
    height = min(int(_eval(cr, session, "document.documentElement.scrollHeight")), 16000)
    cr.send("Emulation.setDeviceMetricsOverride",
            {"width": 1360, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
    data = cr.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
    path.write_bytes(base64.b64decode(data))


def _visible(cr, session, selector: str) -> list[str]:
    """Texts of the elements matching `selector` that are laid out (not hidden)."""
    return _eval(cr, session, f"[...document.querySelectorAll({json.dumps(selector)})]"
                              ".filter(e => e.offsetParent !== null).map(e => e.textContent)")


def _set(cr, session, selector: str, value: str, event: str) -> None:
    """Type / choose `value` in a control and fire the event a user's input would."""
    _eval(cr, session, f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.value = {json.dumps(value)};"
                       f" e.dispatchEvent(new Event({json.dumps(event)})); }})()")


def _check_loaded_and_inert(cr, session, url):
    # every request the page made: the document itself and data: URIs, nothing failed
    requested = [e["params"]["request"]["url"] for e in cr.events if e["method"] == "Network.requestWillBeSent"]
    failed = [e["params"] for e in cr.events if e["method"] == "Network.loadingFailed"]
    assert requested and all(u == url or u.startswith("data:") for u in requested), requested
    assert failed == []
    problems = [e for e in cr.events if e["method"] in ("Runtime.exceptionThrown", "Log.entryAdded")
                and (e["method"] != "Log.entryAdded" or e["params"]["entry"]["level"] == "error")]
    assert problems == []
    assert _eval(cr, session, "document.documentElement.dataset.jsReady") == "1"
    boxes = json.loads(_eval(cr, session, """JSON.stringify([...document.querySelectorAll('main > section')].map(s => {
        const r = s.getBoundingClientRect(), st = getComputedStyle(s);
        return [s.id, r.height, st.display, st.visibility]; }))"""))
    assert [b[0] for b in boxes] == ["headline", "summary", "iterations", "objects", "csr", "training", "relevance",
                                     "samples", "questions", "provenance"]
    assert all(h > 60 and d != "none" and v == "visible" for _, h, d, v in boxes), boxes
    assert _eval(cr, session, "[...document.images].every(i => i.complete && i.naturalWidth > 0)")
    # the payload is text, not markup: nothing ran, no element came from it
    assert _eval(cr, session, "document.body.dataset.pwned === undefined")
    assert _eval(cr, session, "document.scripts.length") == 1
    assert _eval(cr, session, "document.querySelectorAll('img[src=\"x\"], [onerror]').length") == 0
    assert _eval(cr, session, f"document.body.textContent.includes({json.dumps(PAYLOAD)})")


def _check_summary(cr, session):
    """Headline; every delta has a CI (or says it has none) and only CI-backed deltas are coloured;
    POPE per setting; the model's yes ratio with no direction and the truth's left out."""
    head = _eval(cr, session, "document.querySelector('#headline .lead').textContent")
    assert "From demo/base to demo/iter_2" in head and "significantly better" in head
    assert len(_visible(cr, session, "#headline li.better")) >= 3
    cells = json.loads(_eval(cr, session, """JSON.stringify([...document.querySelectorAll('#summary-table td')]
        .filter(td => td.querySelector('.delta')).map(td => [td.className,
            td.querySelectorAll('.ci')[1].textContent.trim(), td.textContent.includes('no CI')]))"""))
    assert len(cells) > 20
    for cls, dci, no_ci in cells:
        assert dci or no_ci, (cls, dci)
        assert cls in ("better", "worse", "changed", "ns") if dci else cls == "noci"
    keys = _eval(cr, session, "[...document.querySelectorAll('#summary-table tbody tr')].map(r => r.dataset.key)")
    for setting in ("random", "popular", "adversarial"):
        assert f"pope/pope_accuracy[{setting}]" in keys and f"pope/model_yes_ratio[{setting}]" in keys
    assert "pope/pope_yes_ratio" not in keys
    yes = "document.querySelector('tr[data-key=\"pope/model_yes_ratio\"]')"
    assert _eval(cr, session, f"{yes}.querySelector('.dir').textContent") == "·"
    assert not _eval(cr, session, f"/[↑↓]/.test({yes}.textContent)")
    assert not _eval(cr, session, f"{yes}.querySelector('td.better, td.worse')")
    assert _eval(cr, session, f"{yes}.querySelector('td.changed') !== null")


def _check_browsers(cr, session, tmp_path):
    """Filter and search in both browsers, by scripted input; thumbnails named by file, not path."""
    q = "#question-browser"
    total = len(_visible(cr, session, f"{q} tr.item"))
    assert total == 12 + 6      # POPE and MME questions, one page (the page holds 25)
    _set(cr, session, f"{q} .filter", "hal", "change")
    hal = _eval(cr, session, f"[...document.querySelectorAll('{q} tr.item')].filter(e => !e.hidden).map(e => e.dataset.flags)")
    assert hal and all("hal" in f.split() for f in hal)
    _set(cr, session, f"{q} .filter", "changed", "change")
    _set(cr, session, f"{q} .search", "adversarial", "input")
    rows = _visible(cr, session, f"{q} tr.item")
    assert rows and all("adversarial" in r for r in rows)
    assert _eval(cr, session, f"document.querySelector('{q} .count').textContent").startswith(f"{len(rows)} of ")
    _set(cr, session, f"{q} .search", "", "input")
    _set(cr, session, f"{q} .filter", "", "change")
    c = "#caption-browser"
    _set(cr, session, f"{c} .filter", "hal", "change")
    flags = _eval(cr, session, f"[...document.querySelectorAll('{c} .item')].filter(e => !e.hidden).map(e => e.dataset.flags)")
    assert flags and all("hal" in f.split() for f in flags)
    _set(cr, session, f"{c} .filter", "", "change")
    _set(cr, session, f"{c} .search", "val_007", "input")
    assert [t.strip() for t in _visible(cr, session, f"{c} .imgname")] == ["val_007.png"]
    _set(cr, session, f"{c} .search", "", "input")
    names = _eval(cr, session, "[...document.querySelectorAll('.thumb .small')].map(e => e.textContent.trim())")
    assert names and not any("/" in n for n in names)
    for sec in ("samples", "csr", "questions"):
        assert str(tmp_path) not in _eval(cr, session, f"document.getElementById('{sec}').textContent")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_report_in_headless_chromium(tmp_path):
    html_path = build_report(demo_store(tmp_path, payload=PAYLOAD), tmp_path / "reports" / "browser", page_size=3)
    url = html_path.resolve().as_uri()
    ARTIFACTS.mkdir(exist_ok=True)
    cr = Chromium(tmp_path / "profile")
    try:
        session = _open(cr, url, "light")
        _check_loaded_and_inert(cr, session, url)
        _check_summary(cr, session)
        # plots: 17 summary rows, 2 CSR, 4 training curves (loss, margin, accuracy, log-probs), 2 densities
        assert _eval(cr, session, "document.querySelectorAll('#training svg.plot').length") == 4
        assert _eval(cr, session, "document.querySelectorAll('#iterations svg.plot').length") == \
            _eval(cr, session, "document.querySelectorAll('#summary-table tbody tr').length")
        # the widest-gap pairs, 4 per generating checkpoint, each with its image
        assert _eval(cr, session, "document.querySelectorAll('#csr .pair img[src^=\"data:image/\"]').length") == 8
        _check_browsers(cr, session, tmp_path)
        # sorting and paging work
        first = "document.querySelector('#summary-table tbody tr td').textContent.trim()"
        before = _eval(cr, session, first)
        _eval(cr, session, "document.querySelector('#summary-table th').click()")
        _eval(cr, session, "document.querySelector('#summary-table th').click()")
        assert _eval(cr, session, first) != before
        pages = "[...document.querySelectorAll('#caption-browser .item')].map(p => p.hidden)"
        assert _eval(cr, session, pages) == [False] * 3 + [True] * 7
        _eval(cr, session, "document.querySelector('#caption-browser .pager [data-step=\"1\"]').click()")
        assert _eval(cr, session, pages) == [True] * 3 + [False] * 3 + [True] * 4
        _eval(cr, session, "document.querySelector('#caption-browser .pager [data-step=\"-1\"]').click()")
        _screenshot(cr, _open(cr, url, "light"), ARTIFACTS / "report_light.png")     # as a reader first sees it
        dark = _open(cr, url, "dark")
        bg = _eval(cr, dark, "getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(20, 24, 29)", bg      # the dark palette's --bg
        _screenshot(cr, dark, ARTIFACTS / "report_dark.png")
    finally:
        cr.close()
    for name in ("report_light.png", "report_dark.png"):
        with Image.open(ARTIFACTS / name) as im:
            assert im.width == 1360 and im.height > 4000
            assert len(set(im.convert("L").resize((64, 64)).tobytes())) > 20    # not a blank page
