"""A real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by selenium)
for the pages' tests, and the checks made from the browser's own records: the HTTP status of
each page, every request it sent (the DevTools performance log: ``Network.requestWillBeSent``)
and its console (``SEVERE`` entries: script errors, CSP violations, failed loads).

Chromium starts with no sandbox (tests run as root), no GPU, no QUIC, no background or
component networking, no sync and a fresh profile: on a machine with no way out, anything
else makes it try (and log failures to) outside hosts on its own."""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import require_binary

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "pages"
AXE = ROOT / "tests" / "vendor" / "axe-core" / "axe.min.js"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
KEY_COLUMNS = """
document.querySelectorAll('details').forEach(d => { d.open = true; });
const hidden = []; let wide = 0;
for (const region of document.querySelectorAll('.scroll')) {
  if (region.scrollWidth > region.clientWidth) wide += 1;
  region.scrollLeft = region.scrollWidth;
  for (const cell of region.querySelectorAll('tr > :first-child:not([colspan])')) {
    window.scrollTo(0, cell.getBoundingClientRect().top + window.scrollY - innerHeight / 2);
    const c = cell.getBoundingClientRect(), r = region.getBoundingClientRect();
    const top = document.elementFromPoint((c.left + c.right) / 2, (c.top + c.bottom) / 2);
    const seen = c.left >= r.left - 1 && c.right <= Math.min(r.right, innerWidth) + 1;
    const name = region.getAttribute('aria-labelledby') + ': ' + cell.textContent.trim();
    if (!seen || !cell.contains(top)) hidden.push(name);
  }
}
return [hidden, wide];
"""


def _gone(element: Any) -> bool:
    """Whether ``element``'s document has been replaced. Chromium answers a node of a document
    that is going away either as stale or, mid-navigation, with the inspector error "Node with
    given id does not belong to the document" (seen with chromedriver 156): both mean gone."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


@dataclass
class Visit:
    """What the browser did for one navigation (and what the test did on the page after)."""

    url: str
    status: int | None = None  # of the document finally shown (after redirects)
    requests: list[str] = field(default_factory=list)
    console: list[dict[str, Any]] = field(default_factory=list)


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def foreign(visit: Visit, own: str) -> list[str]:
    """The requests of ``visit`` to any origin but ``own`` (``data:`` URLs are no request)."""
    return [u for u in visit.requests if not u.startswith("data:") and origin(u) != own]


def errors(visit: Visit) -> list[str]:
    return [e["message"] for e in visit.console if e.get("level") == "SEVERE"]


def assert_clean(visit: Visit, own: str, refused: str = "") -> None:
    """No console error, and not one request to another origin than ``own``. ``refused``:
    the URL of a page expected to answer an error status (403, 404, 409), whose one "Failed
    to load resource" line Chromium logs is no fault."""
    failed = f"{refused} - Failed to load resource: the server responded with a status of"
    unexpected = [e for e in errors(visit) if not (refused and e.startswith(failed))]
    assert not unexpected, (visit.url, unexpected)
    assert not foreign(visit, own), (visit.url, foreign(visit, own))


class Browser:
    def __init__(self, work: Path) -> None:
        chromium = require_binary("chromium")
        driver = require_binary("chromedriver")
        self.work = work
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={tempfile.mkdtemp(dir=work, prefix='profile-')}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(options=options, service=Service(driver))
        self.driver.set_page_load_timeout(30)
        self.driver.get("about:blank")
        self.downloads = 0

    def quit(self) -> None:
        self.driver.quit()

    # -- the browser's own records ------------------------------------------------------

    def _drain(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        events = [json.loads(e["message"])["message"] for e in self.driver.get_log("performance")]
        return events, self.driver.get_log("browser")

    def _record(self, visit: Visit) -> Visit:
        events, console = self._drain()
        visit.console += console
        for e in events:
            params = e.get("params", {})
            if e["method"] == "Network.requestWillBeSent":
                if params.get("documentURL", "").startswith("chrome://"):
                    continue  # the browser's own pages (its new-tab page), not ours
                visit.requests.append(params["request"]["url"])
            elif e["method"] == "Network.responseReceived" and params.get("type") == "Document":
                visit.status = params["response"]["status"]
        return visit

    def visit(self, url: str) -> Visit:
        """Open ``url``; what the browser sent, logged and was answered."""
        self._drain()  # what came before is not this visit's
        self.driver.get(url)
        return self._record(Visit(url))

    @contextmanager
    def acting(self, url: str = "") -> Iterator[Visit]:
        """Record what the browser does while the block acts on the page (a click, a form)."""
        self._drain()
        visit = Visit(url or self.driver.current_url)
        yield visit
        self._record(visit)

    # -- what a person does ------------------------------------------------------------

    def click(self, css: str) -> Visit:
        """Click what ``css`` selects (a link, a form's button) and wait for the page it
        leads to: the old document gone, the new one loaded."""
        with self.acting() as visit:
            old = self.driver.find_element(By.TAG_NAME, "html")
            self.driver.find_element(By.CSS_SELECTOR, css).click()
            wait = WebDriverWait(self.driver, 20, poll_frequency=0.05)
            wait.until(lambda _: _gone(old))
            wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
        visit.url = self.driver.current_url
        return visit

    def until_console(self, visit: Visit, text: str) -> None:
        """Wait until the console has said ``text`` (it reports asynchronously), adding what
        it says meanwhile to ``visit``."""

        def said(_: Any) -> bool:
            self._record(visit)
            return any(text in e["message"] for e in visit.console)

        WebDriverWait(self.driver, 10, poll_frequency=0.05).until(said)

    def sign_in(self, base: str, token: str) -> Visit:
        self.driver.delete_all_cookies()
        first = self.visit(f"{base}/ui/signin")
        self.driver.find_element(By.ID, "token").send_keys(token)
        visit = self.click("main form button")
        visit.requests = first.requests + visit.requests
        visit.console = first.console + visit.console
        return visit

    def enter(self, base: str, session_id: str) -> None:
        """Be the browser of an existing session (its cookie, as sign-in sets it): quicker
        than the sign-in form, which :meth:`sign_in` goes through."""
        self.driver.delete_all_cookies()
        self.driver.get(f"{base}/ui/signin")  # on the origin, to set its cookie
        cookie = {"name": "gfo_session", "value": session_id, "path": "/ui", "httpOnly": True}
        self.driver.add_cookie({**cookie, "sameSite": "Strict"})

    def download(self, link: str, name: str) -> bytes:
        """Click the link whose CSS selector is ``link``; the file saved as ``name``."""
        self.downloads += 1
        where = self.work / f"download-{self.downloads}"
        where.mkdir()
        self.driver.execute_cdp_cmd(
            "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(where)}
        )
        self.driver.find_element(By.CSS_SELECTOR, link).click()
        done = where / name
        WebDriverWait(self.driver, 20, poll_frequency=0.05).until(
            lambda _: done.exists() and not list(where.glob("*.crdownload"))
        )
        return done.read_bytes()

    def texts(self, css: str) -> list[str]:
        return [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css)]

    # -- pictures and the accessibility check ----------------------------------------------

    def screenshot(self, path: Path, phone: bool = False) -> dict[str, int]:
        """The whole page as a PNG at ``path`` (a laptop's 1280 px, or a 390 px phone);
        returns the page's widths: the document's and the window's."""
        path.parent.mkdir(parents=True, exist_ok=True)
        d = self.driver
        if phone:
            d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
        try:
            size: dict[str, int] = d.execute_script(
                "const e = document.documentElement;"
                "return {document: e.scrollWidth, window: window.innerWidth,"
                " height: e.scrollHeight}"
            )
            width = max(size["document"], size["window"])
            clip = {"x": 0, "y": 0, "scale": 1, "width": width, "height": size["height"]}
            shot = d.execute_cdp_cmd(
                "Page.captureScreenshot",
                {"format": "png", "captureBeyondViewport": True, "clip": clip},
            )
            path.write_bytes(base64.b64decode(shot["data"]))
        finally:
            if phone:
                d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        return {"document": size["document"], "window": size["window"]}

    @contextmanager
    def phone(self) -> Iterator[None]:
        """The page shown as a 390 px phone shows it, for the block."""
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
        try:
            yield
        finally:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    def axis_text_px(self) -> list[float]:
        """The size each chart's axis text is drawn at on the screen, in CSS pixels: its
        computed font size (in the SVG's units) times the SVG's scale to the screen."""
        sizes: list[float] = self.driver.execute_script(
            "return [...document.querySelectorAll('figure.chart .plot > svg text')].map(t =>"
            " parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);"
        )
        return sizes

    def key_columns(self) -> tuple[list[str], int]:
        """Every table's key column (each row's first cell) with its region scrolled to its
        end (folded details opened): the cells out of view or covered, and how many regions
        were wider than the screen (there was something to scroll)."""
        found: list[Any] = self.driver.execute_script(KEY_COLUMNS)
        return list(found[0]), int(found[1])

    def axe(self) -> list[dict[str, Any]]:
        """axe-core's violations on the page shown (every rule of WCAG 2.x A/AA and axe's
        best practices), each as {id, impact, help, nodes: [target...]}."""
        self.driver.execute_script(AXE.read_text(encoding="utf-8"))
        result: dict[str, Any] = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {resultTypes: ['violations']})"
            ".then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
            " nodes: v.nodes.map(n => n.target.join(' '))}))))"
            ".catch(e => done({error: String(e)}));"
        )
        if isinstance(result, dict):
            raise AssertionError(f"axe-core failed: {result}")
        return list(result)


@contextmanager
def browser(work: Path) -> Iterator[Browser]:
    b = Browser(work)
    try:
        yield b
    finally:
        b.quit()
        shutil.rmtree(work, ignore_errors=True)


def copy_of_page(html: str, extra: str) -> str:
    """A page's HTML with ``extra`` markup put at the start of its body."""
    return html.replace("<body>", "<body>" + extra, 1)
