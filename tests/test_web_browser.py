"""The dashboard in a real headless browser: Debian's Chromium driven by Playwright.

The app runs as `python -m vesti_scrapy web` on 127.0.0.1 and a free port, against a
seeded database under tmp_path. The test opens /crawlers, sees the dead source, clicks
"Reset dead" and sees it alive; it searches the posts page; on /imports it pastes URLs
served by the test's own server and watches the real background crawl finish the job; it
takes a screenshot of each page at phone and desktop widths (into tmp_path, and into docs/ when
VESTI_UPDATE_SCREENSHOTS=1, which is how the README's pictures are made).

Playwright's own browser download cannot work here: the test launches /usr/bin/chromium
(`apt-get install chromium`, which .ci/run does). Without it the tests fail in CI and are
skipped elsewhere.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO, require
from test_web import XSS, seed_database

CHROMIUM = Path("/usr/bin/chromium")
# Chromium here refuses connections in bulk without these (no sandbox as root, no GPU,
# none of its own background traffic).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
DOCS = REPO / "docs"

require(
    CHROMIUM.exists(),
    f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run installs it)",
    module=True,
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[str]:
    db = tmp_path / "data" / "vesti.db"
    seed_database(db)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("VESTI_WEB_TOKEN", "VESTI_SCRAPYD_URL")}
    env["VESTI_DB"] = str(db)
    # The crawls "Import" starts may fetch the test's server on 127.0.0.1.
    env["VESTI_IMPORT_ALLOW_PRIVATE"] = "1"
    log = (tmp_path / "web.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "vesti_scrapy", "web", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/static/style.css", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "the dashboard did not start:\n" + (tmp_path / "web.log").read_text()
                    ) from None
                time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def screenshot(page, tmp_path: Path, name: str, full_page: bool = True, docs: bool = True) -> Path:
    path = tmp_path / "screenshots" / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 5000
    if docs and os.environ.get("VESTI_UPDATE_SCREENSHOTS") == "1":
        DOCS.mkdir(exist_ok=True)
        shutil.copyfile(path, DOCS / path.name)
    return path


def test_dashboard_in_a_browser(dashboard: str, tmp_path: Path):
    from playwright.sync_api import expect, sync_playwright

    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for width, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
                context = browser.new_context(
                    viewport=viewport, device_scale_factor=2 if width == "phone" else 1
                )
                page = context.new_page()
                page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
                for path, name in (("/crawlers", "crawlers"), ("/", "posts"), ("/runs", "runs")):
                    page.goto(dashboard + path)
                    expect(page.locator("main h1")).to_be_visible()
                    # A phone shows its first screen; a desktop the whole page.
                    screenshot(page, tmp_path, f"{name}-{width}", full_page=width == "desktop")
                context.close()

            page = browser.new_page(viewport=DESKTOP)
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

            # /crawlers: the dead source, "Reset dead", and it is alive.
            page.goto(dashboard + "/crawlers")
            row = page.locator("tr", has=page.locator("code", has_text="deadfeed"))
            expect(row.locator("[data-label=Status]")).to_have_text("dead")
            expect(row.locator("[data-label=Errors]")).to_have_text("5")
            page.get_by_role("button", name="Reset dead (1)").click()
            expect(page.get_by_role("status")).to_contain_text(
                "Alive again, with no errors and due now: deadfeed"
            )
            expect(row.locator("[data-label=Status]")).to_have_text("alive")
            expect(row.locator("[data-label=Errors]")).to_have_text("0")
            expect(row.locator("[data-label='Next due']")).to_have_text("now")
            expect(page.get_by_role("button", name="Reset dead")).to_be_disabled()

            # The posts page: a search, and a script in a title is text.
            page.goto(dashboard + "/")
            expect(page.get_by_text(XSS)).to_be_visible()
            page.get_by_label("Search").fill("scheduler")
            page.get_by_role("button", name="Search").click()
            expect(page.locator("li.post")).to_have_count(1)
            expect(page.locator("li.post h2")).to_have_text(
                "Linux 6.19 released with a new scheduler"
            )
            expect(page.locator("li.post mark")).to_have_text("scheduler")
            assert "q=scheduler" in page.url
            page.get_by_label("Search").fill("елка")
            page.get_by_label("Search").press("Enter")
            expect(page.locator("li.post h2")).to_have_text("Новая ёлка для ядра")
            screenshot(page, tmp_path, "search-desktop", docs=False)
        finally:
            browser.close()
    assert dialogs == [], f"a script from a feed ran: {dialogs}"


def test_importing_urls_in_a_browser(dashboard: str, site, tmp_path: Path):
    """Paste URLs, submit, and watch the job page reload itself until the real
    `scrapy crawl urls` that the button started has finished the job."""
    from playwright.sync_api import expect, sync_playwright

    site_, server = site
    site_.load_dir(FIXTURES / "site")
    pasted = "\n".join(
        [
            server.url("/articles/linux-6-19-rc1.html"),
            server.url("/articles/btrfs-scrub.html"),
            "https://lwn.net/Articles/1/",  # already a post: a duplicate, not fetched
            server.url("/articles/gone.html"),  # 404
            server.url("/articles/btrfs-scrub.html#comments"),  # the same URL again
            XSS,
        ]
    )
    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=DESKTOP)
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.goto(dashboard + "/imports")
            expect(page.get_by_text("No import jobs yet.")).to_be_visible()
            page.get_by_label("URLs, one a line").fill(pasted)
            page.get_by_role("button", name="Import").click()

            expect(page).to_have_url(dashboard + "/imports/1")
            expect(page.get_by_role("status")).to_contain_text(
                "Job 1: 4 URLs queued, 2 lines rejected (listed below); the crawl started."
            )
            rejected = page.locator(".rejected li")
            expect(rejected).to_have_count(2)
            expect(rejected.nth(0)).to_contain_text("duplicate of line 2")
            expect(rejected.nth(1)).to_contain_text(XSS)  # as text

            # The page reloads itself (meta refresh) until the crawl has done the job.
            expect(page.locator("h1 .badge")).to_have_text("done", timeout=120_000)
            expect(page.locator(".running")).to_have_count(0)
            cards = page.locator(".cards .card")
            expect(cards.filter(has_text="saved").locator(".n")).to_have_text("2")
            expect(cards.filter(has_text="duplicate").locator(".n")).to_have_text("1")
            expect(cards.filter(has_text="error").locator(".n")).to_have_text("1")
            expect(page.locator(".bar-text")).to_contain_text("4/4")
            states = page.locator("td[data-label=State]")
            expect(states).to_have_text(["saved", "saved", "duplicate", "error"])
            expect(page.locator("td[data-label='Warning / error']").nth(3)).to_contain_text(
                "HTTP 404"
            )
            expect(page.locator("td[data-label=Post]").nth(0)).to_contain_text("#")
            expect(page.get_by_role("button", name="Retry failed job 1")).to_be_enabled()
            expect(page.get_by_role("button", name="Pause job 1")).to_be_disabled()

            page.goto(dashboard + "/imports")
            row = page.locator("tr", has=page.get_by_role("link", name="Job 1"))
            expect(row.locator("[data-label=Status]")).to_have_text("done")
            expect(row.locator(".bar-text")).to_contain_text("4/4")

            for width, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
                context = browser.new_context(
                    viewport=viewport, device_scale_factor=2 if width == "phone" else 1
                )
                shot = context.new_page()
                for path, name in (("/imports", "imports"), ("/imports/1", "import-job")):
                    shot.goto(dashboard + path)
                    expect(shot.locator("main h1")).to_be_visible()
                    screenshot(shot, tmp_path, f"{name}-{width}", full_page=width == "desktop")
                context.close()
        finally:
            browser.close()
    assert dialogs == [], f"a script from the pasted text ran: {dialogs}"
