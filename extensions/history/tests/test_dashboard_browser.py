"""The dashboard in a real browser: Debian's Chromium, headless, driven by Selenium.

Pages load with no console error, a chart renders (a screenshot that is not blank), and the
filter hides what it should. Skipped, saying why, where Chromium, its driver or Selenium is
missing (CI installs them). ``ZLF_DASHBOARD_SCREENSHOT=FILE`` keeps the index's screenshot.
"""
from __future__ import annotations

import functools
import http.server
import io
import os
import shutil
import threading

import pytest

from test_history import add, runs_with  # this folder's helpers


def _browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install 'zlf-history[test]')")
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("no Chromium and chromedriver (apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1600"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


@pytest.fixture
def site(zlf_cli, tmp_path):
    db = str(tmp_path / "h.sqlite")
    paths = runs_with(tmp_path, [1.0] * 8 + [1.15] * 8, other="softmax/1024x1024/float16")
    for i, p in enumerate(paths):
        add(zlf_cli, db, p, labels=(f"compiler=c{i:02d}",))
    out = tmp_path / "site"
    zlf_cli.inprocess("history", "html", str(out), "--db", db, check_rc=0)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _errors(browser) -> list:
    """Console errors since the last call (a failed load, a script error)."""
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def _not_blank(png: bytes) -> int:
    """Distinct colours in the screenshot (a blank page has one or two)."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    return len(img.resize((320, 400)).getcolors(maxcolors=1 << 16) or ())


def test_the_dashboard_loads_renders_and_filters_in_a_browser(site):
    from selenium.webdriver.common.by import By

    browser = _browser()
    try:
        browser.get(site + "/index.html")
        assert browser.title == "zlf history"
        assert _errors(browser) == []
        rows = browser.find_elements(By.CSS_SELECTOR, "#series tr[data-op]")
        assert len(rows) == 2 and browser.find_element(By.ID, "shown").text == "2"
        changes = browser.find_elements(By.CSS_SELECTOR, "#changes tr[data-op]")
        assert len(changes) == 1 and "+1" in changes[0].text  # the +15 % step
        png = browser.get_screenshot_as_png()
        if os.environ.get("ZLF_DASHBOARD_SCREENSHOT"):
            with open(os.environ["ZLF_DASHBOARD_SCREENSHOT"], "wb") as f:
                f.write(png)
        assert _not_blank(png) > 8
        # the op filter hides the other op's rows, and the counter follows
        box = browser.find_element(By.ID, "f-op")
        box.send_keys("softmax")
        visible = [r for r in browser.find_elements(By.CSS_SELECTOR, "#series tr[data-op]") if r.is_displayed()]
        assert [r.get_attribute("data-op") for r in visible] == ["softmax"]
        assert browser.find_element(By.ID, "shown").text == "1"
        assert not any(r.is_displayed() for r in browser.find_elements(By.CSS_SELECTOR, "#changes tr[data-op]"))
        box.clear()
        box.send_keys(" ")  # an input event with an empty filter shows everything again
        label = browser.find_element(By.ID, "f-label")
        label.send_keys("compiler=c15")
        assert browser.find_element(By.ID, "shown").text == "2"
        # a point page: its chart is an SVG with a drawn line and the change marker
        browser.get(site + "/index.html")
        browser.find_element(By.LINK_TEXT, "add/5000/float32").click()
        svg = browser.find_element(By.CSS_SELECTOR, "figure svg")
        assert svg.size["width"] > 300 and svg.size["height"] > 100
        assert "first after" in browser.page_source and "zlf run" in browser.page_source
        png = browser.get_screenshot_as_png()
        if os.environ.get("ZLF_DASHBOARD_SCREENSHOT"):
            with open(os.environ["ZLF_DASHBOARD_SCREENSHOT"].replace(".png", "-point.png"), "wb") as f:
                f.write(png)
        assert _not_blank(png) > 8
        assert _errors(browser) == []
    finally:
        browser.quit()
