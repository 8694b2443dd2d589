"""A producer's lanes share what they learn about routes, and a stream opened to a paused
master is abandoned once the controller replaced it.

Goal (issue 23, `send()` through the asynchronous lanes): with one lane per queue, each lane
kept routes of its own, so after a master was paused every lane found it out by itself (a
stream deadline each), and a new stream's do_put to the paused master ran outside the master
watch: a keyed load stood still for lanes x deadline (tests/integration/test_paused_master.py).
Method: the controller's cluster_list replaced by a table (the IO boundary), a "paused master"
that is a real listening socket which never answers (the kernel accepts the TCP handshake, no
HTTP/2 settings ever come back, as with SIGSTOP), and the client's own channels.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from connector import ClientConfig, Producer
from connector.client import put_channel
from connector.client.put_channel import _PutChannel
from connector.protocol import RetriableError, status_for

ABANDON_WITHIN_S = 5.0  # checks every 50 ms after 100 ms; the stream's deadline is 60 s


def _cluster_list(set_a_master: str, set_a_members: tuple[str, ...]) -> dict:  # type: ignore
    """set "a" with `set_a_members` (ids 1, 2...) mastered by `set_a_master`, all alive."""
    ids = {address: index + 1 for index, address in enumerate(set_a_members)}
    return {"replica_sets": [
        {"replica": {"broker_name": "a", "master_broker_id": ids[set_a_master],
                     "master_address": set_a_master,
                     "brokers": [{"broker_id": i, "broker_address": address}
                                 for address, i in ids.items()]},
         "alive_broker_ids": list(ids.values())}]}


def _answer_from(monkeypatch, answers: list[dict]) -> list[str]:  # type: ignore
    """The controller's cluster_list answers answers[0]; returns the list of calls made."""
    asked: list[str] = []

    def cluster_list(controller: str, timeout_ms: int, tls: object = None,  # type: ignore
                     credentials: object = None) -> dict:
        asked.append(controller)
        return answers[0]

    monkeypatch.setattr(put_channel, "controller_cluster_list", cluster_list)
    return asked


def test_a_lane_uses_the_route_another_lane_learnt(monkeypatch) -> None:  # type: ignore
    answers = [_cluster_list("a:1", ("a:1", "a:2"))]
    asked = _answer_from(monkeypatch, answers)
    producer = Producer(ClientConfig(controller="c:1"), idempotent=True)
    lane_0 = producer._lane_channel(("t", None, 0))
    lane_1 = producer._lane_channel(("t", None, 1))
    assert lane_0.endpoint == "a:1" and lane_1.endpoint == "a:1"
    assert len(asked) == 1  # one controller call for every lane
    answers[0] = _cluster_list("a:2", ("a:1", "a:2"))  # set a failed over
    lane_0._refresh_route("a:1")  # lane 0 found a:1 unreachable
    assert lane_1.endpoint == "a:2" and lane_0.endpoint == "a:2"
    assert producer.endpoint == "a:2"  # send_batch's channel too
    assert len(asked) == 2
    assert lane_1._pinned("a:2", []) == "a:2"


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """host:port of a listener that never accepts nor answers (a SIGSTOPped broker)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_a_new_stream_to_a_paused_master_is_abandoned_once_it_is_replaced(
        monkeypatch, silent_endpoint: str) -> None:  # type: ignore
    replacement = "127.0.0.1:1"  # never called: the abandonment is what is checked
    monkeypatch.setattr(put_channel, "controller_cluster_list",
                        lambda controller, timeout_ms, tls=None, credentials=None:
                        _cluster_list(replacement, (silent_endpoint, replacement)))
    config = ClientConfig(controller="c:1", request_timeout_ms=30_000,
                          master_check_after_ms=100, master_check_interval_ms=50)
    channel = _PutChannel(config, idempotent=True)
    batch = pa.record_batch({"body": pa.array([b"x"], pa.binary())})
    started = time.monotonic()
    with pytest.raises(RetriableError, match="replaced master") as raised:
        channel._round_trip("t", batch, silent_endpoint)  # no stream yet: do_put blocks
    assert raised.value.name == "NOT_MASTER"
    assert time.monotonic() - started < ABANDON_WITHIN_S
    assert channel._routes.stale  # the next attempt asks the controller first
    assert channel._streams.idle_count() == 0  # abandoned: closed, never given back
    channel.close()


def test_lanes_that_fail_on_one_broker_together_move_once() -> None:
    """Two brokers, two lanes failing on the first at once: both go to the second (moving
    once each would have sent both back to the failed one)."""
    producer = Producer(ClientConfig(brokers=("a:1", "b:1")))
    lane_0 = producer._lane_channel(("t", None, 0))
    lane_1 = producer._lane_channel(("t", None, 1))
    assert lane_0.endpoint == lane_1.endpoint == "a:1"
    lane_0._refresh_route("a:1")
    lane_1._refresh_route("a:1")  # its failure was on the broker already left
    assert lane_0.endpoint == lane_1.endpoint == "b:1"
    lane_1._refresh_route("b:1")
    assert lane_0.endpoint == "a:1"


def _two_sets(b_master: str | None) -> dict:  # type: ignore
    """set "a" mastered by a:1, set "b" by `b_master` (None: b has no alive master)."""
    found = _cluster_list("a:1", ("a:1",))
    found["replica_sets"].append(
        {"replica": {"broker_name": "b", "master_broker_id": 1 if b_master else None,
                     "master_address": b_master or "",
                     "brokers": [{"broker_id": 1, "broker_address": "b:1"}]},
         "alive_broker_ids": [1] if b_master else []})
    return found


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_routes_missing_a_master_are_fetched_again_soon(monkeypatch) -> None:  # type: ignore
    """Set b had no master at the first fetch (an election under way) and nothing fails
    afterwards: the producer still learns b's new master, within about a second, although
    the periodic refresh is ten minutes away. Before: it sent to a only, until a call failed
    (chaos seed 505: set broker-a got no write for 230 s)."""
    answers = [_two_sets(None)]
    _answer_from(monkeypatch, answers)
    producer = Producer(ClientConfig(controller="c:1", route_refresh_interval_ms=600_000))
    assert producer.endpoint == "a:1" and producer._routes.endpoints == ("a:1",)
    assert producer._routes.incomplete
    answers[0] = _two_sets("b:1")  # b's master elected
    assert _wait_for(lambda: (producer.endpoint, producer._routes.endpoints)[1]
                     == ("a:1", "b:1")), producer._routes.endpoints
    assert not producer._routes.incomplete


def test_complete_routes_are_fetched_again_every_interval(monkeypatch) -> None:  # type: ignore
    answers = [_cluster_list("a:1", ("a:1", "a:2"))]
    asked = _answer_from(monkeypatch, answers)
    producer = Producer(ClientConfig(controller="c:1", route_refresh_interval_ms=100))
    assert producer.endpoint == "a:1" and len(asked) == 1
    for _ in range(3):
        assert producer.endpoint == "a:1"  # within the interval: no controller call
    assert len(asked) == 1
    answers[0] = _two_sets("b:1")  # a second replica set joined the cluster
    assert _wait_for(lambda: (producer.endpoint, producer._routes.endpoints)[1]
                     == ("a:1", "b:1")), producer._routes.endpoints


def test_a_hanging_controller_holds_no_call_up(monkeypatch) -> None:  # type: ignore
    """The periodic fetch runs beside the calls: while it hangs, calls use the known routes,
    and a failed fetch keeps them."""
    release = threading.Event()
    calls = [0]

    def cluster_list(controller: str, timeout_ms: int, tls: object = None,  # type: ignore
                     credentials: object = None) -> dict:
        calls[0] += 1
        if calls[0] > 1:
            assert release.wait(30)
            raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"), "controller down")
        return _cluster_list("a:1", ("a:1",))

    monkeypatch.setattr(put_channel, "controller_cluster_list", cluster_list)
    producer = Producer(ClientConfig(controller="c:1", route_refresh_interval_ms=1))
    assert producer.endpoint == "a:1"
    time.sleep(0.01)
    assert producer.endpoint == "a:1"  # starts the background fetch, which hangs
    assert _wait_for(lambda: calls[0] == 2)
    assert producer._routes.fetch_lock.locked()  # the fetch is still under way ...
    assert producer.endpoint == "a:1"  # ... and a call gets its endpoint meanwhile
    release.set()
    assert _wait_for(lambda: not producer._routes.fetch_lock.locked())
    assert producer._routes.endpoints == ("a:1",)  # the failed fetch kept the routes
