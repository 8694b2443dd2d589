"""The console and /metrics of a secured cluster, in a real browser and with real TLS.

Goal: on `rocketha-cluster up` (TLS, authentication, authorization) the console is HTTPS
only; the admin (Super) user's keys are refused at its login form with one line; a viewer
user made with rocketha-admin logs in and sees the replica set and its master, and only the
topics its ACLs let it read the queues of; "Log out" ends the session. `/metrics` is HTTPS,
401 without a client certificate, served with the cluster's client certificate.
Method: one controller and one broker started by the tool; Debian's Chromium, headless,
through chromium-driver and Selenium (it does not know the cluster CA: acceptInsecureCerts;
the certificate itself is checked by http.client against ca.pem below).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from connector.client import ClientConfig, Producer
from tests.integration.operated_cluster import wait_for
from tests.integration.test_console import CHROMEDRIVER, CHROMIUM
from tests.support.page import page_text

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, timeout=180, cwd=ROOT, check=False, input=stdin)


@pytest.fixture
def secure_browser():  # type: ignore[no-untyped-def]
    assert CHROMIUM and CHROMEDRIVER, "the console's test needs chromium and chromium-driver"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    options.accept_insecure_certs = True  # the cluster CA is not in the browser's store
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--window-size=1400,1800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


_text = page_text  # one script call: no stale element after a redraw


def _log_in(driver, url: str, access_key: str, secret_key: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    driver.get(url + "login")
    driver.find_element(By.ID, "access_key").send_keys(access_key)
    driver.find_element(By.ID, "secret_key").send_keys(secret_key)
    driver.find_element(By.ID, "login-button").click()


def _get(url: str, context: ssl.SSLContext) -> int:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=20,
                                             context=context)
    try:
        connection.request("GET", parts.path)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_secured_console_and_metrics(tmp_path: Path, secure_browser) -> None:  # type: ignore[no-untyped-def]
    directory = tmp_path / "cluster"
    started = _run("ha.cluster", "up", "--dir", str(directory), "--controllers", "1",
                   "--replicas", "1", "--set", "mappedFileSizeCommitLog=8388608",
                   "--set", "autoCreateTopicEnable=true")  # the topics come from produces
    try:
        assert started.returncode == 0, started.stderr
        status = json.loads(_run("ha.cluster", "status", "--dir", str(directory),
                                 "--json").stdout)
        url = status["console_url"]
        assert url.startswith("https://127.0.0.1:")
        tls_dir = directory / "tls"
        verified = ssl.create_default_context(cafile=str(tls_dir / "ca.pem"))
        assert _get(url + "api/cluster", verified) == 401  # the certificate checks out
        properties = str(directory / "client.properties")
        (broker,) = [p for p in status["processes"] if p["kind"] == "broker"]
        signed = ClientConfig.from_properties(properties, brokers=(broker["endpoint"],),
                                              controller=None)
        with Producer(signed) as producer:
            producer.send_batch("orders", [{"body": b"o"}] * 3)
            producer.send_batch("secret-topic", [{"body": b"s"}] * 2)
        made = _run("rocketha_admin", "--client-config", properties, "user", "create",
                    "--name", "viewer", "--access-key", "AK_viewer", "--secret-stdin",
                    stdin="viewer-secret-0123456789\n")
        assert made.returncode == 0, made.stderr
        allowed = _run("rocketha_admin", "--client-config", properties, "acl", "create",
                       "--subject", "User:viewer", "--resources", "Topic:orders,Cluster",
                       "--actions", "Get,List")
        assert allowed.returncode == 0, allowed.stderr

        admin = dict(line.split("=", 1) for line in
                     (directory / "admin.credentials").read_text().splitlines() if "=" in line)
        _log_in(secure_browser, url, admin["accessKey"], admin["secretKey"])
        wait_for(lambda: "Super user's keys are not accepted" in _text(secure_browser,
                                                                       "#refusal"),
                 20, "the Super user's refusal")
        _log_in(secure_browser, url, "AK_viewer", "viewer-secret-0123456789")
        master_css = f'#replica-sets [data-replica-set="{broker["name"]}"] .master-address'
        wait_for(lambda: _text(secure_browser, master_css) == broker["endpoint"], 30,
                 "the console to name the master")
        wait_for(lambda: "AK_viewer" in _text(secure_browser, "#viewer"), 10, "the viewer")
        cookies = {c["name"]: c for c in secure_browser.get_cookies()}
        session = cookies["rocketha_console_session"]
        assert session["httpOnly"] and session["secure"] and session["sameSite"] == "Strict"
        wait_for(lambda: " 3 " in f" {_text(secure_browser, '#topics')} ", 20,
                 "the readable topic's count")
        assert "secret-topic" not in _text(secure_browser, "#topics")  # not this viewer's
        from selenium.webdriver.common.by import By

        secure_browser.find_element(By.CSS_SELECTOR, "#logout button").click()
        wait_for(lambda: secure_browser.current_url.endswith("/login"), 20, "logged out")

        metrics = broker["metrics_endpoint"]
        assert metrics.startswith("https://")
        assert _get(metrics, verified) == 401
        with_cert = ssl.create_default_context(cafile=str(tls_dir / "ca.pem"))
        with_cert.load_cert_chain(str(tls_dir / "client-admin.pem"),
                                  str(tls_dir / "client-admin-key.pem"))
        assert _get(metrics, with_cert) == 200
        controller_metrics = next(p for p in status["processes"]
                                  if p["kind"] == "controller")["metrics_endpoint"]
        assert _get(controller_metrics, with_cert) == 200
        assert _get(controller_metrics, verified) == 401

        for endpoint in (url, metrics, controller_metrics):  # hostile peers, then served
            _garbage(urllib.parse.urlsplit(endpoint))
        assert _get(metrics, with_cert) == 200 and _get(controller_metrics, with_cert) == 200
        assert _get(url + "api/cluster", verified) == 401
        _standalone_console(directory, tls_dir, verified)
    finally:
        _run("ha.cluster", "down", "--dir", str(directory))


def _garbage(endpoint: urllib.parse.SplitResult) -> None:
    """Plaintext HTTP, random bytes and a truncated ClientHello at an HTTPS port."""
    for junk in (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(2048),
                 b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"):
        with socket.create_connection((endpoint.hostname, endpoint.port), timeout=10) as sock:
            try:
                sock.sendall(junk)
                sock.shutdown(socket.SHUT_WR)
                sock.recv(1024)
            except OSError:
                pass  # a reset is an answer too


def _standalone_console(directory: Path, tls_dir: Path, verified: ssl.SSLContext) -> None:
    """`rocketha-console --client-config` of a secured cluster: refused without a certificate
    (one line), HTTPS with one, and the admin's keys refused at its login."""
    properties = str(directory / "client.properties")
    status = json.loads(_run("ha.cluster", "status", "--dir", str(directory),
                             "--json").stdout)
    controller = next(p for p in status["processes"] if p["kind"] == "controller")["endpoint"]
    refused = _run("controller.console", "--controller", controller, "--port", "0",
                   "--client-config", properties)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith(
        "rocketha-console: a secured cluster's console serves HTTPS")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    console = subprocess.Popen(
        [sys.executable, "-m", "controller.console", "--controller", controller, "--port",
         str(port), "--client-config", properties, "--cert-file",
         str(tls_dir / "client-admin.pem"), "--key-file", str(tls_dir / "client-admin-key.pem")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"https://127.0.0.1:{port}/"

        def answers() -> bool:
            try:
                return _get(url + "healthz", verified) == 200
            except OSError:
                assert console.poll() is None, console.stderr.read() if console.stderr else ""
                return False

        wait_for(answers, 30, "the standalone console")
        assert _get(url + "api/cluster", verified) == 401
        assert form_login(url, verified, "AK_viewer", "viewer-secret-0123456789")[0] == 303
    finally:
        console.terminate()
        console.wait(timeout=30)
        if console.stderr is not None:
            console.stderr.close()


def form_login(url: str, context: ssl.SSLContext, access_key: str, secret_key: str
               ) -> tuple[int, bytes]:
    """POST the console's login form as a browser would (its token, cookie and Origin):
    (the status, the page)."""
    parts = urllib.parse.urlsplit(url)

    def request(method: str, body: bytes = b"", headers: dict[str, str] | None = None
                ) -> tuple[int, bytes, list[str]]:
        connection = http.client.HTTPSConnection(parts.hostname or "", parts.port,
                                                 timeout=20, context=context)
        try:
            connection.request(method, "/login", body=body or None, headers=headers or {})
            response = connection.getresponse()
            return (response.status, response.read(),
                    response.headers.get_all("Set-Cookie") or [])
        finally:
            connection.close()

    _, page, cookies = request("GET")
    token = re.search(rb'name="csrf" value="([^"]+)"', page)
    assert token and cookies
    form = urllib.parse.urlencode({"access_key": access_key, "secret_key": secret_key,
                                   "csrf": token.group(1).decode()}).encode()
    status, page, _ = request("POST", form, {
        "Origin": f"https://{parts.netloc}", "Cookie": cookies[0].split(";", 1)[0],
        "Content-Type": "application/x-www-form-urlencoded"})
    return status, page


