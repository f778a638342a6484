"""A broker's configuration page in a real headless Chromium: read, change a run-time
key through the confirmation page, and see the broker's refusal of another key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.console.browser import Browser, chromium_path
from tests.console.test_browser import Standalone, Visit

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    server = Standalone(tmp_path / "data")
    yield server
    server.stop()


def test_broker_configuration_is_read_and_changed_with_confirmation(
        standalone: Standalone, browser: Browser) -> None:
    visit = Visit(browser, standalone.console)
    b = browser
    visit.page("/cluster")
    addr = b.eval("document.querySelector('a[href^=\"/brokers/\"]').getAttribute('href')"
                  ).split("/")[-1]
    visit.page(f"/brokers/{addr}")
    b.click("#broker-config-link")
    row = 'tr[data-key="autoCreateSubscriptionGroup"] td.value'
    assert b.text(row) == "true"
    visit.shot("broker-config")

    b.submit("#config-form", {"key": "autoCreateSubscriptionGroup", "value": "false"})
    assert b.exists("#confirm-form")
    assert "autoCreateSubscriptionGroup is 'true'" in b.text(".error")
    b.click("#confirm")
    assert "autoCreateSubscriptionGroup is now 'false'" in b.text("#flash")
    assert b.text(row) == "false"

    b.submit("#config-form", {"key": "brokerName", "value": "renamed"})
    b.click("#confirm")
    assert "refused to set brokerName" in b.text("#error")
    visit.shot("broker-config-refused")
