"""The replay site in a real browser: headless Chromium opening pages from file://.

Needs Debian's ``chromium`` package (``/usr/bin/chromium``) and Playwright for Python;
Playwright's own browser download is not used. Without either, every test here skips
with a message (CI sets BENCHCLAW_REQUIRE_BROWSER=1, which turns a skip into a failure).
Screenshots of each page are written to ``test-artifacts/`` for people to look at.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchclaw.site import build_site
from benchclaw.site._render import exp_url, run_url
from tests.synth_runs import synth_runs

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


def _playwright():
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install 'benchclaw[browser]')")
    return sync_playwright


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser") / "runs"
    info = synth_runs(root, 18)
    out = root.parent / "site"
    build_site(root, out)
    return out, info


@pytest.fixture(scope="module")
def browser():
    sync_playwright = _playwright()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield b
        finally:
            b.close()


class Watch:
    """A page that records console errors, page errors and every request it makes."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def open(self, path: Path, shot: str):
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_load_state("load")
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"site-{shot}.png"), full_page=True)
        return self.page

    def assert_clean(self):
        assert self.errors == []
        outside = [u for u in self.requests if not u.startswith("file://")]
        assert outside == [], f"requests left file://: {outside}"
        assert self.page.evaluate("typeof window.__xss") == "undefined"


@pytest.mark.parametrize("which", ["index", "experiment", "run"])
def test_page_opens_from_disk_cleanly(built, browser, which):
    out, info = built
    path = {"index": out / "index.html", "experiment": out / exp_url(info.experiment),
            "run": out / run_url(info.xss_run)}[which]
    w = Watch(browser)
    page = w.open(path, which)
    w.assert_clean()
    assert page.locator("link[rel=stylesheet]").count() == 1
    # the stylesheet applied (a file:// CSS that failed to load would leave the default font colour)
    assert page.evaluate("getComputedStyle(document.querySelector('header.top')).display") == "flex"
    assert page.locator(".badge-sim").first.is_visible()
    if which == "experiment":
        assert page.locator("svg.chart").count() == 4  # pass/cost, tokens, time, tokens/s by quarter
        assert page.locator("table.policies tbody tr").count() >= 7
    w.page.close()


def test_xss_probe_shows_as_text_and_never_runs(built, browser):
    out, info = built
    w = Watch(browser)
    page = w.open(out / run_url(info.xss_run), "xss-run")
    w.assert_clean()
    assert page.locator("script").count() == 0
    assert page.locator("main img").count() == 0
    assert page.get_by_text("<script>window.__xss = 1", exact=False).first.is_visible()
    w.page.close()


def test_clicks_reach_a_run_replay_with_its_checks(built, browser):
    out, _ = built
    w = Watch(browser)
    page = w.open(out / "index.html", "click-index")
    page.get_by_role("link", name="Charts, decisions and every cell →").first.click()
    page.get_by_role("link", name="browse the cells →").click()
    page.locator("table.grid tbody a").first.click()
    page.locator(".tiercard a", has_text="Replay run").first.click()
    page.wait_for_load_state("load")
    assert "/runs/" in page.url
    assert page.get_by_role("heading", name="Checks").is_visible()
    assert page.locator("#checks + table tbody tr").count() >= 1
    page.screenshot(path=str(ARTIFACTS / "site-click-run.png"), full_page=True)
    w.assert_clean()
    w.page.close()


def test_a_site_moved_elsewhere_still_works(built, browser, tmp_path):
    import shutil

    out, info = built
    moved = tmp_path / "some" / "deeper" / "path"
    shutil.copytree(out, moved)
    w = Watch(browser)
    page = w.open(moved / exp_url(info.experiment), "moved-experiment")
    page.locator("a", has_text="browse the cells").click()
    assert page.url.startswith(moved.resolve().as_uri())
    w.assert_clean()
    w.page.close()



# -- across experiments: the comparison page and the corrections log ----------------------------

XSS_TEXT = "<img src=x onerror=\"window.__xss=1\">"


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """Three experiments whose decisions on one hypothesis differ (tests/test_compare.py),
    and a correction of E02 whose text carries an XSS probe."""
    from benchclaw.experiments import correct
    from benchclaw.evidence.store import Store

    from .analysis_factories import write_store
    from .test_compare import _inconclusive, _journal_runs, _refuted, _supported

    root = tmp_path_factory.mktemp("compared") / "runs"
    store = Store(root, fsync=False)
    ids = {}
    for exp in (_supported(), _refuted(), _inconclusive()):
        write_store(exp, store)
        ids[exp.experiment] = _journal_runs(store, exp.experiment)
    correct(store, "E02", claim="The ladder is 34% cheaper.", wrong=f"A cell was left out {XSS_TEXT}.",
            why="An independent review found it.", corrected="The ladder is 40% dearer per task.",
            runs=ids["E02"][:1])
    out = root.parent / "site"
    build_site(root, out)
    return out


def test_comparison_page_opens_cleanly_and_links_every_figure(compared, browser):
    w = Watch(browser)
    page = w.open(compared / "compare.html", "compare")
    w.assert_clean()
    assert page.locator("svg.chart").count() == 4  # claims, cost change, pass rate, cost
    cells = page.locator("#hypotheses tbody tr").first.locator(".dec")
    assert [cells.nth(i).inner_text().lower() for i in range(cells.count())] == ["supported", "refuted", "inconclusive"]
    assert page.locator("#hypotheses .mv").first.inner_text() == "flipped"
    # a figure leads to its experiment's policy table, whose row says the same
    fig = page.locator("#figures tbody tr").first.locator("td a").nth(1)  # E02's pass rate
    shown = fig.locator("b").inner_text()
    fig.click()
    page.wait_for_load_state("load")
    assert page.url.endswith("experiments/E02.html#policies")
    row = page.locator("table.policies tbody tr", has_text="always:ultra").first
    assert shown in row.inner_text()
    w.assert_clean()
    w.page.close()


def test_corrections_log_is_shown_escaped_and_links_its_runs(compared, browser):
    w = Watch(browser)
    page = w.open(compared / "compare.html", "compare-corrections")
    log = page.locator("#corrections .correction")
    assert log.count() == 1 and log.first.is_visible()
    assert "The ladder is 40% dearer per task." in log.first.locator(".corrected").inner_text()
    assert XSS_TEXT in log.first.inner_text()  # shown as text
    assert page.locator("main img").count() == 0
    w.assert_clean()  # and never run
    log.first.locator("a", has_text="E02").click()
    page.wait_for_load_state("load")
    assert "experiments/E02.html" in page.url
    assert page.locator("#corrections .correction").first.is_visible()
    page.locator("#corrections .correction a.mono").first.click()
    page.wait_for_load_state("load")
    assert "/runs/" in page.url and page.get_by_role("heading", name="Checks").is_visible()
    w.assert_clean()
    w.page.close()
