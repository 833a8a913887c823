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
