"""The web console in a real browser: Debian's Chromium, headless, driven by Selenium.

Goal: what a person sees on the console started by `rocketha-cluster up` is the cluster's
truth, and stays so across a failover: the Raft leader, the replica set's master, slaves and
SyncStateSet, a topic with its message count, its topic table (lag and last commit), a consumer
group's lag, the election list; after
the master is SIGKILLed the page (refreshing itself, no reload) names the new master and the
new election. Method: one controller and three brokers started by the tool, traffic through
the client library, Chromium through chromium-driver; a screenshot is saved next to the test's
temporary directory (its path is printed) to look at.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Producer
from tests.integration.operated_cluster import OperatedCluster, wait_for
from tests.support.page import page_text

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser():  # type: ignore[no-untyped-def]
    assert CHROMIUM and CHROMEDRIVER, (  # not a skip: the console's test must run
        "the console test needs Debian's chromium and chromium-driver: "
        "`python3 build.py test` (or `python3 build.py setup`) installs them as root with "
        "apt-get, else says how")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--window-size=1400,1800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


_text = page_text  # one script call: no stale element after a redraw


# A row of #tables as {header: cell text}, read in one script call: the page redraws its
# tables every refresh, so reading headers and cells by separate WebDriver calls can see
# two different drawings (or a stale element).
_TABLE_ROW_SCRIPT = """
const headers = [...document.querySelectorAll('#tables th')].map((th) => th.textContent.trim());
const row = document.querySelector('#tables tr[data-table="' + arguments[0] + '"]');
if (!row) { return {}; }
const cells = [...row.querySelectorAll('td')].map((td) => td.textContent.trim());
return Object.fromEntries(headers.map((h, i) => [h, cells[i]]));
"""


def test_console_shows_the_new_master_after_a_failover(tmp_path: Path, browser) -> None:  # type: ignore[no-untyped-def]
    cluster = OperatedCluster(tmp_path / "cluster", defaultTopicQueueNums="2",
                              tieredStoreUrl=f"file://{tmp_path / 'tier'}",
                              topicTableDefault="delta", topicTableIntervalMs="300")
    try:
        master = cluster.wait_master()
        config = ClientConfig(brokers=(master["endpoint"],), retries_max=3)
        with Producer(config) as producer:
            producer.send_batch("orders", [{"body": b"o" * 64}] * 30)
        Admin(config).commit_offset("billing", "orders", 0, 5)
        url = next(p for p in cluster.status() if p["kind"] == "controller")["console_url"]
        assert url and url.startswith("http://127.0.0.1:")
        browser.get(url)
        master_css = '#replica-sets [data-replica-set="broker-a"] .master-address'
        wait_for(lambda: _text(browser, master_css) == master["endpoint"], 20,
                 "the console to name the master")
        assert "Raft leader n1" in _text(browser, "#leader")
        assert "leader" in _text(browser, "#controllers")
        replica_set = _text(browser, '#replica-sets [data-replica-set="broker-a"]')
        assert "SyncStateSet [" in replica_set and replica_set.count("SLAVE") == 2
        wait_for(lambda: "orders" in _text(browser, "#topics")
                 and " 30 " in f" {_text(browser, '#topics')} ", 10, "the topic and its count")
        def table_cells() -> dict[str, str]:  # the row by its header: the cells, not the text
            return browser.execute_script(_TABLE_ROW_SCRIPT, "orders")  # one read: no redraw

        # Each cell by its column: matching " 0 0 " in the row's text once passed on
        # commits=0 rows=0 before the first commit (CI, 2026-12-02).
        wait_for(lambda: table_cells().get("rows") == "30"
                 and table_cells().get("lag (messages)") == "0", 60,
                 "the topic table to hold all 30 rows, 0 messages behind")
        cells = table_cells()
        assert float(cells["lag (seconds)"]) == 0, cells
        assert cells["replica set"] == "broker-a" and cells["last error"] == "none", cells
        assert cells["table"] == str(tmp_path / "tier" / "tables" / "orders"), cells
        assert int(cells["commits"]) >= 1 and int(cells["version"]) >= 0, cells
        assert re.fullmatch(r"\d+:\d\d:\d\d.*", cells["last commit"]), cells  # its time
        groups = _text(browser, "#groups")
        assert "billing" in groups and "orders" in groups
        assert "broker-a" in _text(browser, "#elections")

        cluster.kill(master)
        successor = cluster.wait_master(not_name=master["name"])
        wait_for(lambda: _text(browser, master_css) == successor["endpoint"], 20,
                 f"the console to name the new master {successor['endpoint']}")
        wait_for(lambda: _text(browser, "#elections").count("broker-a") >= 2, 10,
                 "the failover's election in the list")
        down = _text(browser, '#replica-sets [data-replica-set="broker-a"]')
        assert master["endpoint"] in down  # the dead broker is still listed, as not alive
        shot = tmp_path / "console-after-failover.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
    finally:
        cluster.down()
