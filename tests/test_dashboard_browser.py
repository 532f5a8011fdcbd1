"""The dashboard: `sweeper dashboard` wiring (password hidden, artifact store passed) and a real
headless Chromium (Debian's chromium + chromedriver, driven by selenium) on a sweep the test ran.

The browser test fails, never skips, under CI=true when Chromium is missing (`make browser`).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sweeper.study import open_storage
from tests.support.compare import invoke, isolate, quadratic_spec, run_sweep
from tests.support.helpers import stop_process

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOT = REPO / "docs" / "dashboard.png"


def _publish(shot: Path, dest: Path) -> None:
    """`SWEEPER_UPDATE_DOCS=1 make test` refreshes the documentation's screenshots (docs/*.png)
    from this test (atomically); a plain test run leaves the committed ones alone."""
    if os.environ.get("SWEEPER_UPDATE_DOCS") != "1":
        return
    dest.parent.mkdir(exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
    shutil.copyfile(shot, tmp)
    os.replace(tmp, dest)


# --------------------------------------------------------------------------- CLI wiring


def test_dashboard_prints_url_without_password_and_passes_the_artifact_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str) -> None:
    import optuna_dashboard
    from optuna.artifacts import FileSystemArtifactStore

    isolate(tmp_path, monkeypatch)
    spec = quadratic_spec("dash-cli", trials=1)
    spec["artifacts"] = {"store": "filesystem", "path": str(tmp_path / "art")}
    run_sweep(tmp_path, pg_url, spec)
    calls: list[dict[str, Any]] = []

    def fake_run_server(storage: Any, **kwargs: Any) -> None:
        """Listens as the real server would, until sweeper's readiness probe has connected."""
        calls.append({"storage": storage, **kwargs})
        with socket.socket() as s:
            s.bind((kwargs["host"], kwargs["port"]))
            s.listen()
            s.accept()[0].close()

    monkeypatch.setattr(optuna_dashboard, "run_server", fake_run_server)
    port = _free_port()
    result = invoke("dashboard", "dash-cli", "--storage", pg_url, "--port", str(port))
    assert result.exit_code == 0, result.output
    password = "sweeper-test-pw"
    assert password in pg_url and password not in result.output
    starting, ready = result.stderr.splitlines()
    assert starting == f"starting optuna-dashboard on http://127.0.0.1:{port} ..."
    assert re.search(r"optuna-dashboard for postgresql://sweeper:\*\*\*@.* on "
                     rf"http://127\.0\.0\.1:{port}/dashboard/studies/\d+ \(artifacts: "
                     + re.escape(str(tmp_path / "art")), ready)
    (call,) = calls
    assert call["port"] == port and call["host"] == "127.0.0.1"
    store = call["artifact_store"]
    assert isinstance(store, FileSystemArtifactStore)
    assert Path(store._base_path) == tmp_path / "art"  # noqa: SLF001 - no public getter

    # No NAME: the whole storage, with the store its sweeps share.
    calls.clear()
    assert invoke("dashboard", "--storage", pg_url, "--port", str(_free_port())).exit_code == 0
    assert Path(calls[0]["artifact_store"]._base_path) == tmp_path / "art"  # noqa: SLF001


def test_dashboard_port_in_use_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    open_storage(url)  # the dashboard never creates a storage
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = invoke("dashboard", "--storage", url, "--port", str(port))
    assert result.exit_code == 2  # a usage problem, like the dashboard's other errors
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: cannot serve on "
                                                             f"127.0.0.1:{port}")


# --------------------------------------------------------------------------- real browser


def _require_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        msg = (f"{', '.join(missing)} not installed: `make browser` (apt-get install chromium "
               "chromium-driver)")
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def test_missing_chromium_fails_under_ci_and_skips_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="make browser"):
        _require_browser()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        _require_browser()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dashboard_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A grid sweep of the fast objective (12 trials, each saving an artifact), then the
    installed console script `sweeper dashboard` serving it as a subprocess."""
    _require_browser()
    isolate(tmp_path, monkeypatch)
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    spec = quadratic_spec("ui-sweep", method="grid", parameters={
        "x": {"type": "float", "values": [0.125, 0.375, 0.625, 0.875]},
        "opt": {"type": "categorical", "choices": ["adam", "sgd", "lion"]}})
    run_sweep(tmp_path, url, spec)
    port = _free_port()
    exe = Path(sys.executable).with_name("sweeper")
    log = open(tmp_path / "dashboard.log", "w+b")  # noqa: SIM115
    proc = subprocess.Popen([str(exe), "dashboard", "ui-sweep", "--storage", url,
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies",
                                            timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"dashboard did not start: {log.read().decode()[-2000:]}")
                time.sleep(0.2)
        pattern = r"on (http://127\.0\.0\.1:\d+/dashboard/studies/\d+) "
        while True:  # the URL line follows as soon as the port listens
            log.seek(0)
            output = log.read().decode()
            match = re.search(pattern, output)
            if match or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert output.startswith(f"starting optuna-dashboard on http://127.0.0.1:{port} ...")
        assert match, output
        yield match.group(1)
    finally:
        stop_process(proc)
        log.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--window-size=1400,1000",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _wait_text(driver: Any, pattern: str, timeout: float = 30) -> str:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def found(d: Any) -> str | bool:
        text = d.find_element(By.TAG_NAME, "body").text
        return text if re.search(pattern, text) else False

    try:
        return str(WebDriverWait(driver, timeout, poll_frequency=0.2).until(found))
    except TimeoutException:
        body = driver.find_element(By.TAG_NAME, "body").text
        raise AssertionError(f"{pattern!r} not on {driver.current_url}:\n{body[:3000]}") from None


@pytest.mark.browser
def test_dashboard_in_a_real_browser(dashboard_url: str, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from sweeper.study import load_sweep, open_storage

    sweep = load_sweep(open_storage(f"sqlite:///{tmp_path / 'sweeps.db'}"), "ui-sweep")
    trial0 = sweep.study().trials[0]

    # The study page: its name in the header, the history and intermediate-value charts.
    browser.get(dashboard_url)
    _wait_text(browser, r"ui-sweep \(id=\d+\)")
    _wait_text(browser, r"Intermediate values")
    deadline = time.monotonic() + 15
    while len(browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) < 2:
        assert time.monotonic() < deadline, "plots did not render"
        time.sleep(0.2)
    time.sleep(1.0)  # let the plots finish drawing before the screenshot
    shot = tmp_path / "dashboard.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000
    _publish(shot, SCREENSHOT)

    # The trial list: the trial count, trial 0's params, provenance attrs and its artifact.
    browser.get(f"{dashboard_url}/trials")
    text = _wait_text(browser, r"12 Trials")
    text = _wait_text(browser, r"Trial 0 \(trial_id=\d+\)")
    for name, value in trial0.params.items():
        assert re.search(rf"\b{name}\s+{re.escape(str(value))}\b", text), (name, value)
    assert "sweeper:code_version" in text and "test-build-1" in text
    assert "sweeper:spec_hash" in text and sweep.spec.spec_hash in text
    _wait_text(browser, r"Artifacts[\s\S]*result\.json")
    trials_shot = tmp_path / "dashboard-trials.png"
    assert browser.save_screenshot(str(trials_shot))
    _publish(trials_shot, SCREENSHOT.with_name("dashboard-trials.png"))

    # The study list (home) shows the sweep too.
    browser.get(dashboard_url.split("/dashboard")[0] + "/dashboard")
    _wait_text(browser, r"ui-sweep")
