"""The studio in a real browser: headless Chromium drives whole visitor sessions.

One session (JavaScript on) starts runs, sees turns arrive live over server-sent events,
sees its remaining budget fall, spends it, and gets the refusal page; a second session in
another browser context (JavaScript off: the pages refresh themselves) is unaffected.
Skips like the site's browser tests when Debian's chromium or Playwright is missing.
"""

from __future__ import annotations

import re
import time
from decimal import Decimal

import pytest

from .studio_helpers import StudioProcess, write_config
from .test_browser_site import ARGS, ARTIFACTS, CHROMIUM, _playwright

pytestmark = pytest.mark.browser


@pytest.fixture
def studio(tmp_path):
    config = write_config(tmp_path / "studio.toml", tasks=("quotes-incident", "cents-fees"),
                          policies=("always:lightning", "ladder"), session_usd="0.005", max_tokens=1024,
                          latency_scale=0.15)
    with StudioProcess(config, tmp_path / "runs") as s:
        yield s


@pytest.fixture
def browser():
    sync_playwright = _playwright()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield b
        finally:
            b.close()


def _usd(page) -> Decimal:
    return Decimal(page.locator("#remaining-usd").inner_text().lstrip("$"))


def _watch(page, errors: list) -> None:
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))


def test_a_whole_session_to_its_refusal_and_a_second_one_unaffected(studio, browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    _watch(page, errors)
    page.goto(studio.url + "/")
    assert page.locator(".badge-sim").first.is_visible()
    before = _usd(page)
    stale = ctx.new_page()   # a tab left open on the start form: submitted after the budget is gone
    stale.goto(studio.url + "/")
    ARTIFACTS.mkdir(exist_ok=True)

    live_seen = False
    for i in range(8):
        if page.locator("form.studio-form").count() == 0:
            break
        page.select_option("select[name=policy]", "always:lightning")
        page.click("#start")
        page.wait_for_url(re.compile(r"/jobs/[0-9a-f]{32}$"))
        rendered = page.locator("#live li").count()
        if "hidden" in (page.locator("#done").get_attribute("class") or ""):
            # Running: turns must arrive over the event stream while we watch.
            # (polled from here: the page's CSP forbids the eval wait_for_function needs)
            deadline = time.monotonic() + 30
            while page.locator("#live li").count() <= rendered and time.monotonic() < deadline:
                time.sleep(0.05)
            live_seen = live_seen or page.locator("#live li").count() > rendered
        page.wait_for_selector("#done:not(.hidden)", timeout=60_000)
        assert page.locator("#live li.ev-call").count() >= 1
        page.screenshot(path=str(ARTIFACTS / f"studio-job-{i}.png"), full_page=True)
        after = _usd(page)
        assert after < before, "the session's remaining budget falls with every run"
        before = after
        replay = page.locator("#replays a").first
        if replay.count():
            replay.click()
            page.wait_for_load_state("load")
            assert page.get_by_role("heading", name="Checks").is_visible()
        page.goto(studio.url + "/")
    assert live_seen
    assert i >= 2, "at least two runs before the budget is spent"
    assert page.locator("form.studio-form").count() == 0, "the budget should be spent by now"
    assert "budget is spent" in page.locator(".refusal").inner_text()
    page.screenshot(path=str(ARTIFACTS / "studio-spent.png"), full_page=True)

    stale.click("#start")                      # the old form, after the money is gone
    stale.wait_for_load_state("load")
    assert stale.locator("h1").inner_text() == "Budget spent"
    assert "this session's budget is spent" in stale.locator("#refusal").inner_text()
    stale.screenshot(path=str(ARTIFACTS / "studio-refused.png"), full_page=True)
    assert errors == []

    # A second visitor, in another context, with JavaScript off: full budget, runs fine.
    other = browser.new_context(java_script_enabled=False)
    p2 = other.new_page()
    p2.goto(studio.url + "/")
    assert _usd(p2) == Decimal("0.005")
    p2.select_option("select[name=task]", "cents-fees")
    p2.click("#start")
    p2.wait_for_url(re.compile(r"/jobs/[0-9a-f]{32}$"))
    deadline = time.monotonic() + 60
    while "hidden" in (p2.locator("#done").get_attribute("class") or "") and time.monotonic() < deadline:
        time.sleep(0.5)        # the page reloads itself every 2 s (meta refresh in <noscript>)
    assert "hidden" not in (p2.locator("#done").get_attribute("class") or "")
    assert p2.locator("#live li.ev-call").count() >= 1
    assert _usd(p2) < Decimal("0.005")
    p2.screenshot(path=str(ARTIFACTS / "studio-nojs.png"), full_page=True)
    ctx.close()
    other.close()
