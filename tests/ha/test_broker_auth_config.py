"""The broker's authentication settings, secrets files and audit log (ha/broker/auth.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conf import read_credentials_file
from ha.broker.auth import AuditLog, load_acl_file
from ha.broker.config import BrokerConfig
from storage_engine import ConfigError


@pytest.mark.parametrize(("key", "value"), [
    ("authenticationEnabled", "yes"), ("authenticationClockSkewMs", "10"),
    ("authenticationReplayCacheMax", "0"), ("auditLogBytesMax", "x"),
])
def test_bad_values_name_their_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_properties({key: value})
    assert caught.value.key == key


def test_static_mode_with_authentication_needs_an_acl_file() -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_properties({"authenticationEnabled": "true"})
    assert caught.value.key == "aclFile"
    config = BrokerConfig.from_properties({"authenticationEnabled": "true",
                                           "enableControllerMode": "true",
                                           "controllerAddr": "127.0.0.1:9876"})
    assert config.auth.authentication_enabled and not config.auth.acl_file


def test_secrets_files_others_may_read_are_refused(tmp_path: Path) -> None:
    keys = tmp_path / "inner.credentials"
    keys.write_text("accessKey=AK\nsecretKey=s3cret-value\n")
    keys.chmod(0o640)
    with pytest.raises(ValueError, match="chmod 600") as caught:
        read_credentials_file(str(keys))
    assert "s3cret" not in str(caught.value)
    keys.chmod(0o600)
    assert read_credentials_file(str(keys)).access_key == "AK"
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"users": [{"name": "a", "access_key": "AK", "secret_key": "x"}]}))
    acl.chmod(0o600)
    with pytest.raises(ValueError, match="secretKey must be"):
        load_acl_file(str(acl))  # too short a secret: the file is refused whole


def test_the_audit_log_is_json_lines_rotated_by_size(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    audit = AuditLog(str(path), 2048, 2, "broker")
    try:
        for index in range(100):
            audit.record("authorization", "User:alice", "10.0.0.1", "DoPut", f"Topic:t{index}",
                         "Pub", "denied", "no policy allows Pub")
    finally:
        audit.close()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    files = sorted(tmp_path.glob("audit.log*"))
    assert [f.name for f in files] == ["audit.log", "audit.log.1", "audit.log.2"]
    assert all(f.stat().st_size <= 2048 for f in files)
    last = [json.loads(line) for line in path.read_text().splitlines()][-1]
    assert last["resource"] == "Topic:t99" and last["outcome"] == "denied"
    assert last["source"] == "10.0.0.1" and last["principal"] == "User:alice"
