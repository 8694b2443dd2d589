"""`rocketha-cluster up` is secured by default (issue 16): a generated admin user.

Goal: without `--insecure`, `up` writes the admin user's keys to DIR/admin.credentials and
DIR/client.properties (both 0600), starts controllers and brokers with authentication and
authorization on (and mutual TLS: tests/integration/test_tls_cluster.py) and without topic
creation by a first produce (it fails naming the command that creates one), and the tool's own
readiness/status calls work; a client with the keys is served, one without is refused; the
secret is in no configuration file and on no command line, and the brokers hold no keys (their
certificates prove them). Static mode (no controllers) gets the same through aclFile.
"""

from __future__ import annotations

import json
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from connector.client import Admin, ClientConfig, Producer
from connector.protocol import RocketHAError
from tests.integration.test_console_secured import form_login

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, timeout=180, cwd=ROOT, check=False)


def _check_console(url: str, keys_text: str, ca_path: Path) -> None:
    """The console is HTTPS, asks for a login, and refuses the Super user's keys at it (a
    viewer's login: tests/integration/test_console_secured.py)."""
    assert url.startswith("https://")
    context = ssl.create_default_context(cafile=str(ca_path))
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(url + "api/cluster", timeout=10, context=context).close()
    caught.value.close()
    assert caught.value.code == 401
    keys = dict(line.split("=", 1) for line in keys_text.splitlines() if "=" in line)
    status, page = form_login(url, context, keys["accessKey"], keys["secretKey"])
    assert status == 401 and b"Super user&#x27;s keys are not accepted" in page


@pytest.mark.parametrize(("controllers", "replicas"), [("1", "2"), ("0", "1")])
def test_up_is_secured_by_default(tmp_path: Path, controllers: str, replicas: str) -> None:
    """With a controller and two replicas, the slave finds its master (broker_info, unsigned:
    its member certificate proves it) and replicates: a put is acknowledged by both."""
    directory = tmp_path / "cluster"
    started = _run("ha.cluster", "up", "--dir", str(directory), "--controllers", controllers,
                   "--replicas", replicas, "--set", "mappedFileSizeCommitLog=8388608")
    try:
        assert started.returncode == 0, started.stderr
        keys = directory / "admin.credentials"
        assert stat.S_IMODE(keys.stat().st_mode) == 0o600
        secret = dict(line.split("=", 1) for line in keys.read_text().splitlines()
                      if "=" in line)["secretKey"]
        status = json.loads(_run("ha.cluster", "status", "--dir", str(directory),
                                 "--json").stdout)
        brokers = [p for p in status["processes"] if p["kind"] == "broker"]
        assert all(b["alive"] for b in brokers)
        (broker,) = [b for b in brokers if b["role"] == "MASTER"]
        assert sorted(b["role"] for b in brokers) == ["MASTER", "SLAVE"][:int(replicas)]
        properties = directory / "client.properties"
        assert stat.S_IMODE(properties.stat().st_mode) == 0o600
        assert f"secretKey={secret}" in properties.read_text()
        for conf in (directory / "conf").iterdir():
            if conf.name.startswith("proxy."):  # the RocketMQ endpoint: admin keys only
                assert conf.name == "proxy.credentials" or secret not in conf.read_text()
                continue
            assert secret not in conf.read_text()
            assert "authenticationEnabled=true" in conf.read_text()
            assert "innerClientCredentialsFile" not in conf.read_text()  # mutual TLS instead
        for process in status["processes"]:
            assert secret.encode() not in Path(f"/proc/{process['pid']}/cmdline").read_bytes()
        endpoint = broker["endpoint"]
        signed = ClientConfig.from_properties(properties, brokers=(endpoint,), controller=None,
                                              retries_max=0)
        with pytest.raises(RocketHAError) as missing:  # secured: no topic made by a typo
            Producer(signed).send("t", b"x")
        assert missing.value.name == "TOPIC_NOT_EXIST"
        assert "rocketha-admin topic create --topic t" in str(missing.value)
        created = _run("rocketha_admin", "--broker", endpoint, "--client-config",
                       str(properties), "topic", "create", "--topic", "t", "--queues", "2")
        assert created.returncode == 0, created.stderr
        assert Producer(signed).send("t", b"x").status == "PUT_OK"
        with pytest.raises(RocketHAError) as caught:  # TLS with a client certificate, no keys
            Admin(ClientConfig.from_properties(properties, brokers=(endpoint,), controller=None,
                                               access_key=None, secret_key=None,
                                               retries_max=0)).list_topics()
        assert caught.value.name == "UNAUTHENTICATED"
        audit = directory / "logs" / f"{broker['name']}-audit.log"
        unsigned = audit.read_text().count("unsigned request")  # the refused call just above
        listed = _run("rocketha_admin", "--broker", endpoint, "--client-config",
                      str(properties), "topic", "list", "--json")
        assert listed.returncode == 0 and '"t"' in listed.stdout, listed.stderr
        assert audit.read_text().count("unsigned request") == unsigned  # the probe signs too
        if controllers == "0":  # static: the tool takes client.properties' first brokerAddr
            alone = _run("rocketha_admin", "--client-config", str(properties), "topic", "list",
                         "--json")
            assert alone.returncode == 0 and '"t"' in alone.stdout, alone.stderr
        tls_only = directory / "tls-only.properties"
        tls_only.write_text("\n".join(line for line in properties.read_text().splitlines()
                                      if not line.startswith(("accessKey", "secretKey"))))
        refused = _run("rocketha_admin", "--broker", endpoint, "--client-config", str(tls_only),
                       "topic", "list")
        assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
        if controllers == "1":  # --credentials-file: the keys from another file
            users = _run("rocketha_admin", "--client-config", str(tls_only),
                         "--credentials-file", str(keys), "user", "list", "--json")
            assert [u["name"] for u in json.loads(users.stdout)["users"]] == ["admin"]
            _check_console(status["console_url"], keys.read_text(),
                           directory / "tls" / "ca.pem")
        again = _run("ha.cluster", "up", "--dir", str(directory), "--insecure")
        assert again.returncode != 0 and "cannot turn it off" in again.stderr
    finally:
        _run("ha.cluster", "down", "--dir", str(directory))
