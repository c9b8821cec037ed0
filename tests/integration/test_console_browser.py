"""The console in a real headless browser against a real worker.

Debian's ``chromium``, driven from Python by selenium through Debian's ``chromium-driver``
(its path given, so nothing downloads a driver): the test starts instances of a workflow
and a saga, the page lists them with the right counts, an instance's timeline shows each of
its steps, a signal and a cancel sent from the page take effect, and a dead letter sent back
from the page is decided. It saves a screenshot of an instance page to docs/console.png.
Skipped, saying why, only where chromium or its driver is absent (``.ci/run`` installs both).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidings import App, Cancelled, Finished
from tests.console_support import ConsoleProcess, console_app, console_state, console_workers, consoles  # noqa: F401
from tests.integration.console_apps import Book
from tests.integration.saga_apps import Pay
from tests.workers import ROOT, Workers

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.skipif(
    not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver; .ci/run does)",
)

T = TypeVar("T")


def _driver() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    # The driver's path is given: selenium-manager never looks for (or downloads) one.
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def test_the_page_lists_shows_and_acts_in_a_real_browser(
    console_app: App, console_workers: Workers, consoles: Any, console_state: Path, kafka_bootstrap: str,
) -> None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    console_workers.start()
    console: ConsoleProcess = consoles("--allow-actions")
    approval = console_app.workflow_handle("approval")
    client = console_app.client(kafka_bootstrap)

    async def start() -> None:
        for instance_id in ("w-1", "w-2"):
            await approval.start(instance_id, f"order-{instance_id}")
        await client.send("wallet", "alice", Pay(transfer="t-1", target="bob", amount=5), correlation_id="t-1")

    asyncio.run(start())
    driver = _driver()
    try:
        # The page re-renders while it polls: look each element up afresh, and retry a stale one.
        def until(check: Callable[[], T], timeout: float = 30, what: str = "") -> T:
            wait = WebDriverWait(driver, timeout, poll_frequency=0.2,
                                 ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))
            return wait.until(lambda _: check(), message=what)  # type: ignore[no-any-return]

        def css(selector: str) -> Any:
            return driver.find_element(By.CSS_SELECTOR, selector)

        def text(selector: str) -> str:
            return str(css(selector).text)

        def click(selector: str) -> None:
            until(lambda: css(selector).click() or True, what=f"to click {selector}")

        def confirm() -> None:
            until(lambda: css("#confirm").is_displayed(), what="the confirmation")
            click("#confirm-yes")

        def done() -> str:
            return until(lambda: (t := text("#message")).startswith(("done", "the ", "no ", "a ")) and t, what="an answer")

        driver.get(console.url + "/")
        # The overview: the right counts, as the worker makes them.
        until(lambda: text('tr[data-kind="workflow"][data-name="approval"] .total') == "2"
              and text('tr[data-kind="workflow"][data-name="approval"] .count[data-status="RUNNING"] b') == "2"
              and text('tr[data-kind="saga"][data-name="transfer"] .count[data-status="ENDED"] b') == "1",
              timeout=60, what="the overview to count 2 running workflows and 1 ended saga")
        # The saga's page: each transition, and the command its first state sent.
        driver.get(console.url + "/#/saga/transfer/t-1")
        until(lambda: len(driver.find_elements(By.CSS_SELECTOR, "tr.transition")) == 3
              and css("#status").get_attribute("data-status") == "ENDED", what="the saga's three transitions")
        assert "Take" in text('tr.transition[data-seq="1"] .command') and "vault bob" in text('tr.transition[data-seq="1"]')
        # The list, then an instance page through its link.
        driver.get(console.url + "/#/list/workflow?name=approval")
        until(lambda: {row.get_attribute("data-id") for row in driver.find_elements(By.CSS_SELECTOR, "tr.row")}
              == {"w-1", "w-2"}, what="the list to show w-1 and w-2")
        assert "2" in text("#counts") and "RUNNING 2" in text("#counts")
        click('tr.row[data-id="w-1"] a')
        until(lambda: css('#timeline li.step[data-step="1"]').get_attribute("data-state") == "completed"
              and css('#timeline li.step[data-step="2"]').get_attribute("data-state") == "running",
              what="w-1's timeline: score done, waiting for the signal")
        assert "activity score" in text('#timeline li.step[data-step="1"]')
        assert "attempt 1" in text('#timeline li.step[data-step="1"]')
        assert "signal decision" in text('#timeline li.step[data-step="2"]')

        # A signal from the page: the page follows the instance to its end without a reload.
        def fill_signal() -> bool:
            name = css("#signal-name")
            name.clear()
            name.send_keys("decision")
            payload = css("#signal-payload")
            payload.clear()
            payload.send_keys('"approved"')
            css("#signal-send").click()
            return True

        until(fill_signal, what="to send the signal")
        assert done().startswith("done"), text("#message")
        until(lambda: css("#status").get_attribute("data-status") == "FINISHED", what="w-1 to finish on the page")
        until(lambda: css('#timeline li.step[data-step="3"]').get_attribute("data-state") == "completed",
              what="the receipt step on the timeline")
        assert "order-w-1:approved:9" in text('#timeline li.step[data-step="3"]')
        assert [e.get_attribute("data-signal") for e in driver.find_elements(By.CSS_SELECTOR, "#timeline li.signal")] == ["decision"]
        driver.save_screenshot(str(ROOT / "docs" / "console.png"))
        finished = asyncio.run(approval.result("w-1", timeout=30))
        assert isinstance(finished, Finished) and finished.value == "order-w-1:approved:9"

        # A cancel from the page, after its confirmation.
        driver.get(console.url + "/#/workflow/approval/w-2")
        click("#cancel")
        confirm()
        assert done().startswith("done"), text("#message")
        until(lambda: css("#status").get_attribute("data-status") == "CANCELLED", what="w-2 to be cancelled on the page")
        assert isinstance(asyncio.run(approval.result("w-2", timeout=30)), Cancelled)

        # A dead letter, sent back from the page once its cause is gone.
        (console_state / "closed").write_text("1")

        async def book() -> None:
            try:
                await client.send("ledger", "l-1", Book(entry="e-1", amount=7), 5)
            except Exception:  # noqa: BLE001 - the worker dead-letters it; the sender's view is not the point
                pass

        asyncio.run(book())
        driver.get(console.url + "/#/list/deadletters")
        until(lambda: css("tr.row[data-status=HandlerFailed] a"), what="the dead letter in the list")
        click("tr.row[data-status=HandlerFailed] a")
        until(lambda: "aggregate.ledger.commands" in text("#replay-verdict"), what="the letter's page")
        (console_state / "closed").unlink()
        click("#replay")
        confirm()
        assert done().startswith("done"), text("#message")
        driver.get(console.url + "/#/aggregate/ledger/l-1")
        until(lambda: "Booked" in text('tr.event[data-version="1"]'), what="the letter sent back to be decided")
    finally:
        driver.quit()
