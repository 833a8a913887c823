"""Shared pytest configuration.

Browser tests skip (with a message) where Debian's Chromium is missing; CI installs it and
sets BENCHCLAW_REQUIRE_BROWSER=1, which turns such a skip into a failure, so CI can never
pass by silently skipping them.
"""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and item.get_closest_marker("browser")
            and os.environ.get("BENCHCLAW_REQUIRE_BROWSER") == "1"):
        report.outcome = "failed"
        report.longrepr = f"browser test skipped although BENCHCLAW_REQUIRE_BROWSER=1: {report.longrepr}"


@pytest.fixture(scope="session")
def demo_result(tmp_path_factory):
    """One zero-latency demo for the tests that only read what it produced (the bundle, the
    runs directory): the demo is the suite's slowest fixture, so it runs once."""
    from benchclaw.demo import run_demo

    return run_demo(tmp_path_factory.mktemp("demo"), say=lambda s: None, note=lambda s: None,
                    latency_scale=0)
