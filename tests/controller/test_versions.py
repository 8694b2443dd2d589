"""Protocol versions on the controller's links: Raft messages and broker register/heartbeat.

Goal: a Raft message carries the sender's version ("p") and a receiver decodes one without it
(v0.1.0) as 0.1; one the rule refuses is a CodecError carrying the rule's line (the transport
closes that connection). A controller answers a broker two minors apart VERSION_REFUSED, with
its own version, before the broker counts as heard; a broker that says nothing (v0.1.0) is
served. Method: pure codec calls; one real controller process for the broker calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conf.protocol import LOCAL
from controller.errors import CodecError
from controller.raft import VoteRequest, decode_message, encode_message
from tests.controller.controller_process import ControllerGroup, call

VOTE = VoteRequest(1, 2, 3, False, 4, 2)


def test_raft_messages_carry_the_version_and_absence_is_0_1() -> None:
    body = json.loads(encode_message(VOTE))
    assert body["p"] == LOCAL.text()
    assert decode_message(json.dumps(body).encode()) == VOTE
    del body["p"]  # as v0.1.0 sends it
    assert decode_message(json.dumps(body).encode()) == VOTE


@pytest.mark.parametrize("protocol", ["0.4 0.4.0", "1.2", 7, "zero"])
def test_a_raft_message_the_rule_refuses_is_a_codec_error_with_the_line(protocol: object
                                                                       ) -> None:
    body = {**json.loads(encode_message(VOTE)), "p": protocol}
    with pytest.raises(CodecError, match=r"Raft message from node 1 refused: the peer") as err:
        decode_message(json.dumps(body).encode())
    assert "docs/planned-operations.md#compatibility" in str(err.value)


@pytest.mark.integration
def test_a_controller_refuses_a_broker_two_minors_apart(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, 1)
    try:
        group.start()
        group.wait_leader()
        endpoint = group.endpoint(1)
        register = {"cluster_name": "c", "broker_name": "a", "broker_address": "127.0.0.1:1"}
        refused = call(endpoint, "register_broker", {**register, "protocol": "0.4 0.4.0"})
        assert refused["status"] == "VERSION_REFUSED" and refused["protocol"] == LOCAL.text()
        beat = {**register, "broker_id": 1, "protocol": "0.4 0.4.0"}
        assert call(endpoint, "broker_heartbeat", beat)["status"] == "VERSION_REFUSED"
        served = call(endpoint, "register_broker", register)  # v0.1.0 says nothing: 0.1
        assert served["status"] == "OK" and served["protocol"] == LOCAL.text()
        log = group.log(1).read_text()
        assert log.count("broker a at 127.0.0.1:1 refused: the peer speaks protocol 0.4") == 1
    finally:
        group.stop_all()
