"""A broker in controller mode answers a valid user "retry", never "unknown", before its first
user table (the window between opening the client port and the first get_auth_data).

Goal: from the moment the broker answers at all, a call signed by a user the controller knows
gets BUSY (retriable, "the user table is not loaded yet") while the broker has no table, and is
served once the table arrives; it is never refused as UNAUTHENTICATED. Method: deterministic
by construction: the broker starts first, with its controller not running, so no table can
arrive until the test starts the controller (one process, authentication on, the admin user
from initAuthenticationUser); the broker signs its own calls with the admin's keys.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyarrow import flight

from conf.signing import Credentials, action_target, sign_headers
from connector.client import Admin, ClientConfig
from connector.protocol import RocketHAError
from tests.controller.controller_process import ControllerGroup
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration
ADMIN = Credentials("AK_admin", "admin-secret-0123456789")
DEADLINE_S = 30.0


def _private(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def _signed_broker_info(endpoint: str) -> str:
    """"OK", or the Flight error's text (one call, no retry)."""
    client = flight.FlightClient(f"grpc://{endpoint}")
    try:
        headers = sign_headers(ADMIN, "DO_ACTION", action_target("broker_info", b"{}"),
                               int(time.time() * 1000))
        options = flight.FlightCallOptions(timeout=3.0, headers=headers)
        result = list(client.do_action(flight.Action("broker_info", b"{}"), options))
        assert json.loads(result[0].body.to_pybytes())["broker_name"] == "a"
        return "OK"
    except flight.FlightError as err:
        return str(err)
    finally:
        client.close()


def test_a_valid_user_is_told_to_retry_until_the_first_table_then_served(
        tmp_path: Path) -> None:
    group = ControllerGroup(
        tmp_path / "controllers", 1, credentials=ADMIN, authenticationEnabled="true",
        authorizationEnabled="true",
        initAuthenticationUser=f"admin:{ADMIN.access_key}",
        initAuthenticationUserSecretFile=_private(tmp_path / "admin.secret",
                                                  ADMIN.secret_key + "\n"))
    broker = BrokerProcess(
        tmp_path / "broker", name="a", credentials=ADMIN, enableControllerMode="true",
        controllerAddr=group.endpoint(1), brokerHeartbeatInterval="200",
        controllerRequestTimeoutMs="500", authenticationEnabled="true",
        authorizationEnabled="true",
        innerClientCredentialsFile=_private(
            tmp_path / "inner.credentials",
            f"accessKey={ADMIN.access_key}\nsecretKey={ADMIN.secret_key}\n"))
    answers: list[str] = []
    try:
        broker.start(wait=False)
        deadline = time.monotonic() + DEADLINE_S
        while not any("not loaded yet" in answer for answer in answers):
            assert time.monotonic() < deadline, answers[-3:]
            assert broker.process is not None and broker.process.poll() is None
            answers.append(_signed_broker_info(broker.endpoint))
            time.sleep(0.05)
        with pytest.raises(RocketHAError) as refused:  # what a client sees: retriable BUSY
            Admin(ClientConfig(brokers=(broker.endpoint,), request_timeout_ms=3000,
                               retries_max=0, access_key=ADMIN.access_key,
                               secret_key=ADMIN.secret_key)).broker_info()
        assert refused.value.name == "BUSY" and refused.value.retriable, refused.value
        group.start()
        while answers[-1] != "OK":
            assert time.monotonic() < deadline + DEADLINE_S, answers[-3:]
            answers.append(_signed_broker_info(broker.endpoint))
            time.sleep(0.05)
        assert not [answer for answer in answers if "UNAUTHENTICATED" in answer], answers
    finally:
        if broker.process is not None and broker.process.poll() is None:
            broker.kill()
        group.stop_all()
