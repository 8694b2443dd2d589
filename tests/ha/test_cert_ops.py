"""`rocketha-cluster certs` on its own inputs (ha/cluster/cert_ops.py): bad input gets one line.

Goal: `revoke --ca` lists serials in a CA directory's CRL (kept across calls), a serial that is
not hexadecimal, a holder name with --ca, a directory without a cluster, and an unknown holder
are each refused with their own line, writing nothing. Method: main() in-process on a CA made
by ha/cluster/certs.py and a cluster.json written by hand (the integration test
tests/integration/test_cert_rotation.py runs the commands on a real cluster).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ha.cluster.certs import ensure_ca
from ha.cluster.main import main


def _refusal(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as refused:
        main(["certs", *args])
    return str(refused.value.code) + capsys.readouterr().err


def test_revoke_in_a_ca_directory_adds_to_its_crl(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ca = ensure_ca(tmp_path / "ca")
    assert main(["certs", "revoke", "--ca", str(ca.directory), "--serial", "0x1f"]) == 0
    assert main(["certs", "revoke", "--ca", str(ca.directory), "--serial", "a0:01"]) == 0
    assert ensure_ca(ca.directory).revoked() == {0x1F, 0xA001}
    assert "copy it to every machine" in capsys.readouterr().out


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ca = ensure_ca(tmp_path / "ca")
    assert "not hexadecimal" in _refusal(capsys, "revoke", "--ca", str(ca.directory),
                                         "--serial", "zz")
    assert "serials only" in _refusal(capsys, "revoke", "--ca", str(ca.directory), "broker-a")
    assert not ca.crl_path.exists()
    assert "no cluster here" in _refusal(capsys, "list", "--dir", str(tmp_path / "none"))
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    (cluster / "cluster.json").write_text(json.dumps({"tls": True, "brokers": []}))
    refusal = _refusal(capsys, "rotate", "--dir", str(cluster), "broker-z")
    assert "no certificate holder broker-z" in refusal and "client-admin" in refusal
    (cluster / "cluster.json").write_text(json.dumps({"tls": False, "brokers": []}))
    assert "without TLS" in _refusal(capsys, "list", "--dir", str(cluster))
