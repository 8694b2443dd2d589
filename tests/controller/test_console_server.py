"""The console's HTTP surface without a cluster: the page and its assets are served with a
strict Content-Security-Policy, `/api/cluster` reports unreachable controllers instead of
failing, unknown paths are 404, and the authentication hook answers 401 with a Basic
challenge (what makes a browser ask for credentials) until the callable accepts the request.
Method: a real ConsoleServer on 127.0.0.1 pointed at a port nobody listens on, urllib."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping

import pytest

from controller.console.app import ConsoleServer


def _dead_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _allow(headers: Mapping[str, str]) -> bool:
    return headers.get("Authorization") == "Basic b3A6c2VjcmV0"


@pytest.fixture
def console() -> Iterator[str]:
    server = ConsoleServer([_dead_address()], "127.0.0.1", 0, authorize=_allow)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.close()


def _get(url: str, authorized: bool = True) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Authorization": "Basic b3A6c2VjcmV0"}
                                     if authorized else {})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_authorization_hook_asks_for_credentials(console: str) -> None:
    status, headers, _ = _get(console + "/", authorized=False)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic ")
    status, headers, body = _get(console + "/")
    assert status == 200 and b"/console.js" in body
    assert headers["Content-Security-Policy"] == "default-src 'self'"
    assert _get(console + "/console.js")[0] == 200
    assert _get(console + "/nope")[0] == 404


def test_unreachable_controllers_are_reported(console: str) -> None:
    status, _, body = _get(console + "/api/cluster")
    view = json.loads(body)
    assert status == 200 and view["leader"] is None and view["replica_sets"] == []
    assert view["controllers"][0]["reachable"] is False and view["errors"]
