"""Master and slave shells over real sockets and real stores: bytes arrive identical, acks gate
puts, confirm positions bound reads on both sides, a restarted slave resumes.

Method: two MessageStores in temporary directories (auto_confirm=False), a MasterService on a
free port and a SlaveService following it, in one process. Puts go through `append` +
`replicate` as the broker does; waits are for conditions with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ha.replication.config import BrokerRole, HAConfig
from ha.replication.frames import (
    Ack,
    MasterHello,
    SlaveHello,
    Transfer,
    decode_stream,
    encode_frame,
)
from ha.replication.master_service import MasterService
from ha.replication.slave_service import SlaveService
from storage_engine import Message, MessageStore, PutStatus, StoreConfig

SEGMENT = 1 << 20
STORE = StoreConfig(commit_log_segment_size_bytes=SEGMENT, message_size_max_bytes=64 << 10)


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def ha_config(role: BrokerRole, **overrides: object) -> HAConfig:
    settings: dict[str, object] = {
        "broker_role": role, "listen_port": 0, "transfer_batch_bytes": 64 << 10,
        "heartbeat_interval_ms": 100, "housekeeping_interval_ms": 1000, "reconnect_interval_ms": 20,
        "total_replicas": 2, "in_sync_replicas": 2, "min_in_sync_replicas": 1}
    settings.update(overrides)
    return HAConfig(**settings)  # type: ignore[arg-type]


def put(store: MessageStore, service: MasterService, body: bytes, queue_id: int = 0
        ) -> PutStatus:
    plan = service.plan_put()
    if plan.refused:
        return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
    result = store.append(Message(topic="T", body=body, queue_id=queue_id).as_batch())
    assert result.status is PutStatus.PUT_OK
    return service.replicate(result.log_position_end, plan.need, 2000)


def log_bytes(store: MessageStore, upto: int) -> bytes:
    out = bytearray()
    position = store.min_log_position
    while position < upto:
        chunk = store.read_log(position, upto - position)
        assert chunk
        out += chunk
        position += len(chunk)
    return bytes(out)


@pytest.fixture
def pair(tmp_path: Path):
    master_store = MessageStore(tmp_path / "m", STORE, auto_confirm=False)
    slave_store = MessageStore(tmp_path / "s", STORE, auto_confirm=False)
    master = MasterService(master_store, ha_config(BrokerRole.SYNC_MASTER), broker_id=0,
                           endpoint="127.0.0.1:1").start()
    slave_conf = ha_config(BrokerRole.SLAVE, master_address=f"127.0.0.1:{master.listen_port}")
    slave = SlaveService(slave_store, slave_conf, broker_id=1).start()
    yield master_store, master, slave_store, slave, slave_conf
    slave.close()
    master.close()
    slave_store.close()
    master_store.close()


def test_sync_puts_reach_the_slave_byte_for_byte(pair) -> None:
    master_store, master, slave_store, _slave, _ = pair
    wait_for(lambda: master.stats().sync_state_set == (0, 1))
    statuses = [put(master_store, master, b"m%05d" % i * 40, queue_id=i % 3) for i in range(300)]
    assert statuses == [PutStatus.PUT_OK] * 300
    end = master_store.log_position_end
    assert slave_store.log_position_end == end  # acked before PUT_OK
    assert master_store.confirm_log_position == end
    wait_for(lambda: slave_store.confirm_log_position == end)
    assert log_bytes(slave_store, end) == log_bytes(master_store, end)
    wait_for(lambda: slave_store.dispatched_log_position == end)
    got = slave_store.get_messages("T", 1, 0, max_count=1000, max_bytes=1 << 24)
    assert [m.body for m in got.messages()] == [b"m%05d" % i * 40 for i in range(1, 300, 3)]
    assert slave_store.epochs.entries == master_store.epochs.entries


def test_without_the_slave_puts_are_refused_before_writing(pair) -> None:
    master_store, master, _slave_store, slave, _ = pair
    wait_for(lambda: master.stats().sync_state_set == (0, 1))
    assert put(master_store, master, b"first") is PutStatus.PUT_OK
    slave.close()
    wait_for(lambda: master.stats().sync_state_set == (0,))
    end = master_store.log_position_end
    assert put(master_store, master, b"second") is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
    assert master_store.log_position_end == end


def test_a_restarted_slave_resumes_where_it_stopped(pair, tmp_path: Path) -> None:
    master_store, master, slave_store, slave, slave_conf = pair
    wait_for(lambda: master.stats().sync_state_set == (0, 1))
    for i in range(50):
        assert put(master_store, master, b"a%d" % i * 100) is PutStatus.PUT_OK
    slave.close()
    slave_store.close()
    reopened = MessageStore(tmp_path / "s", STORE, auto_confirm=False)
    follower = SlaveService(reopened, slave_conf, broker_id=1).start()
    try:
        wait_for(lambda: master.stats().sync_state_set == (0, 1))
        for i in range(50):
            assert put(master_store, master, b"b%d" % i * 100) is PutStatus.PUT_OK
        end = master_store.log_position_end
        assert log_bytes(reopened, end) == log_bytes(master_store, end)
    finally:
        follower.close()
        reopened.close()


def test_a_garbage_frame_closes_only_its_own_link(pair) -> None:
    master_store, master, slave_store, _slave, _ = pair
    wait_for(lambda: master.stats().sync_state_set == (0, 1))
    with socket.create_connection(("127.0.0.1", master.listen_port)) as intruder:
        intruder.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(64))
        intruder.settimeout(5)
        assert intruder.recv(100) == b""  # the master closed this link
    assert master.stats().sync_state_set == (0, 1)
    assert put(master_store, master, b"still replicated") is PutStatus.PUT_OK
    assert slave_store.log_position_end == master_store.log_position_end


def test_a_slave_behind_the_masters_retention_restarts_at_its_min(tmp_path: Path) -> None:
    config = ha_config(BrokerRole.SYNC_MASTER, in_sync_replicas=1)
    with MessageStore(tmp_path / "m", STORE, auto_confirm=False) as master_store, \
            MessageStore(tmp_path / "s", STORE, auto_confirm=False) as slave_store:
        master = MasterService(master_store, config, broker_id=0, endpoint="h:1").start()
        slave_conf = ha_config(BrokerRole.SLAVE,
                               master_address=f"127.0.0.1:{master.listen_port}")
        try:
            slave = SlaveService(slave_store, slave_conf, broker_id=1).start()
            wait_for(lambda: master.stats().sync_state_set == (0, 1))
            assert put(master_store, master, b"early" * 100) is PutStatus.PUT_OK
            wait_for(lambda: slave_store.log_position_end == master_store.log_position_end)
            slave.close()
            while master_store.log_position_end < 3 * SEGMENT:
                assert put(master_store, master, b"z" * 60_000) is PutStatus.PUT_OK
            far_future_ms = int(time.time() * 1000) + 10**12
            assert master_store.delete_expired(now_ms=far_future_ms, disk_used_ratio=0.0,
                                               floor_log_position=3 * SEGMENT) == 3
            assert master_store.min_log_position == 3 * SEGMENT > slave_store.log_position_end
            slave = SlaveService(slave_store, slave_conf, broker_id=1).start()
            end = master_store.log_position_end
            wait_for(lambda: slave_store.log_position_end == end)
            assert slave_store.min_log_position == 3 * SEGMENT
            assert log_bytes(slave_store, end) == log_bytes(master_store, end)
            slave.close()
        finally:
            master.close()


class ScriptedSlave:
    """A slave played by the test over a real socket: handshake, then ack only when told."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buffer = b""

    def send(self, frame: object) -> None:
        self.sock.sendall(encode_frame(frame))  # type: ignore[arg-type]

    def receive(self) -> object:
        while True:
            frames, _ = decode_stream(self.buffer, 1 << 24)
            if frames:
                first = frames[0]
                self.buffer = self.buffer[len(encode_frame(first)):]  # type: ignore[arg-type]
                return first
            chunk = self.sock.recv(1 << 20)
            assert chunk, "master closed the link"
            self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


def test_put_statuses_when_the_only_slave_stops_acking(tmp_path: Path) -> None:
    config = ha_config(BrokerRole.SYNC_MASTER, housekeeping_interval_ms=60_000)
    with MessageStore(tmp_path / "m", STORE, auto_confirm=False) as store:
        master = MasterService(store, config, broker_id=0, endpoint="h:1").start()
        try:
            slave = ScriptedSlave(master.listen_port)
            slave.send(SlaveHello(1, 0, 0, 0, SEGMENT, ()))
            hello = slave.receive()
            assert isinstance(hello, MasterHello) and hello.master_epoch == 1
            slave.send(Ack(0))
            wait_for(lambda: master.stats().sync_state_set == (0, 1))
            plan = master.plan_put()
            assert plan.need == 2 and not plan.refused
            result = store.append(Message(topic="T", body=b"unacked").as_batch())
            # The slave receives the bytes but never acks: the put times out.
            assert master.replicate(result.log_position_end, plan.need, 300) is \
                PutStatus.FLUSH_SLAVE_TIMEOUT
            assert store.confirm_log_position == 0  # nobody else holds it: invisible
            slave.close()  # the link drops while a put waits: no one left to ack
            result = store.append(Message(topic="T", body=b"orphan").as_batch())
            assert master.replicate(result.log_position_end, plan.need, 5000) is \
                PutStatus.SLAVE_NOT_AVAILABLE
            wait_for(lambda: master.stats().sync_state_set == (0,))
            assert master.plan_put().refused  # IN_SYNC_REPLICAS_NOT_ENOUGH, before writing
        finally:
            master.close()


def test_controller_mode_a_proposal_in_flight_holds_puts_after_its_slave_leaves(
        tmp_path: Path) -> None:
    """The threaded shell drives the in-flight rule of ha/replication/master_core.py (cluster
    simulation seeds 214, 235, ...): the master proposed (0, 1), then slave 1's link closed before
    the controller answered. Alone in its local and accepted set, it still acks nothing slave 1
    lacks until a set of a newer epoch is accepted (the controller may commit the proposal)."""
    config = ha_config(BrokerRole.SYNC_MASTER, all_ack_in_sync_state_set=True)
    master_store = MessageStore(tmp_path / "m", STORE, auto_confirm=False)
    slave_store = MessageStore(tmp_path / "s", STORE, auto_confirm=False)
    lease_until_ms = int(time.monotonic() * 1000) + 600_000
    master = MasterService(master_store, config, broker_id=0, endpoint="127.0.0.1:1",
                           master_epoch=1, accepted_sync_state_set=(0,),
                           accepted_sync_state_set_epoch=1,
                           lease_until_ms=lease_until_ms).start()
    slave = SlaveService(slave_store, ha_config(
        BrokerRole.SLAVE, master_address=f"127.0.0.1:{master.listen_port}"), broker_id=1).start()
    try:
        assert put(master_store, master, b"alone") is PutStatus.PUT_OK
        wait_for(lambda: master.sync_state_sets() == ((0, 1), (0,)))
        master.proposing((0, 1), 1)  # roles.py records it before the request leaves
        slave.close()
        wait_for(lambda: master.sync_state_sets() == ((0,), (0,)))
        assert master.proposal_pending()  # roles.py now proposes (0,) to fence it
        assert put(master_store, master, b"held") is PutStatus.FLUSH_SLAVE_TIMEOUT
        master.accept_sync_state_set((0,), 2)  # the controller's answer to the fence
        assert not master.proposal_pending()
        assert put(master_store, master, b"after") is PutStatus.PUT_OK
    finally:
        slave.close()
        master.close()
        slave_store.close()
        master_store.close()


def test_a_majority_put_completes_on_the_first_ack_while_another_member_lags(
        tmp_path: Path) -> None:
    """3 replicas, inSyncReplicas 2: one slave's ack completes the put even while the other,
    a member of the SyncStateSet that counts as caught up, has not acked it (the confirm
    position, which needs every member, does not move). Before, that ack woke nobody and the
    put ended FLUSH_SLAVE_TIMEOUT although the quorum held its bytes. Heartbeats are slow, so
    the bytes leave only once the put waits in `replicate`, and the ack comes during the wait."""
    config = ha_config(BrokerRole.SYNC_MASTER, total_replicas=3, in_sync_replicas=2,
                       heartbeat_interval_ms=30_000, housekeeping_interval_ms=60_000)
    with MessageStore(tmp_path / "m", STORE, auto_confirm=False) as store:
        master = MasterService(store, config, broker_id=0, endpoint="h:1").start()
        slaves = []
        try:
            for broker_id in (1, 2):
                slave = ScriptedSlave(master.listen_port)
                slaves.append(slave)
                slave.send(SlaveHello(broker_id, 0, 0, 0, SEGMENT, ()))
                assert isinstance(slave.receive(), MasterHello)
                slave.send(Ack(0))
            wait_for(lambda: master.stats().sync_state_set == (0, 1, 2))
            plan = master.plan_put()
            assert plan.need == 2 and not plan.refused
            result = store.append(Message(topic="T", body=b"majority").as_batch())
            end = result.log_position_end
            prompt = slaves[0]  # slaves[1] never acks

            def ack_the_put() -> None:
                shipped = prompt.receive()
                while not (isinstance(shipped, Transfer) and shipped.data):
                    shipped = prompt.receive()
                prompt.send(Ack(shipped.log_position + len(shipped.data)))

            acker = threading.Thread(target=ack_the_put, daemon=True)
            acker.start()
            # a liveness check, not a speed one: the ack must wake the put, which otherwise
            # sleeps its whole timeout (then finds itself done)
            statuses: list[PutStatus] = []
            waiter = threading.Thread(target=lambda: statuses.append(
                master.replicate(end, plan.need, 120_000)), daemon=True)
            waiter.start()
            waiter.join(timeout=20)
            assert statuses == [PutStatus.PUT_OK], "the first slave's ack did not end the put"
            acker.join(timeout=5)
            assert store.confirm_log_position == 0  # not every member holds it yet
            assert master.stats().sync_state_set == (0, 1, 2)
        finally:
            for slave in slaves:
                slave.close()
            master.close()


def test_concurrent_puts_ship_in_log_order_to_every_slave(tmp_path: Path) -> None:
    """Puts ship their own bytes to idle slaves while the senders ship the rest: the ship
    lock must keep each link's transfers in log order (a slave closes a link on a transfer
    that does not start at its log's end). Several threads put at once into a set of 3;
    every put is PUT_OK, both slaves end byte-identical to the master over their first link."""
    config = ha_config(BrokerRole.SYNC_MASTER, total_replicas=3, in_sync_replicas=2)
    stores = [MessageStore(tmp_path / name, STORE, auto_confirm=False) for name in "mab"]
    master = MasterService(stores[0], config, broker_id=0, endpoint="h:1").start()
    slave_conf = ha_config(BrokerRole.SLAVE, master_address=f"127.0.0.1:{master.listen_port}")
    slaves = [SlaveService(store, slave_conf, broker_id=broker_id).start()
              for broker_id, store in ((1, stores[1]), (2, stores[2]))]
    try:
        wait_for(lambda: master.stats().sync_state_set == (0, 1, 2))
        for link in list(master._links.values()):  # a put's own sends are slow: a sender
            send = link.sock.send_transfer  # must wait for them, never overtake them

            def slow_from_puts(transfer: Transfer, data: bytes, send=send) -> None:
                if not threading.current_thread().name.startswith("ha-send"):
                    time.sleep(0.002)  # fault injection at the socket, not a wait
                send(transfer, data)

            link.sock.send_transfer = slow_from_puts  # type: ignore[method-assign]
        statuses: list[PutStatus] = []

        def producer(thread_id: int) -> None:
            for index in range(100):
                statuses.append(put(stores[0], master, b"%d-%d" % (thread_id, index)))

        threads = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert statuses == [PutStatus.PUT_OK] * 400
        end = stores[0].log_position_end
        for slave, store in zip(slaves, stores[1:], strict=True):
            wait_for(lambda store=store: store.log_position_end == end)
            assert log_bytes(store, end) == log_bytes(stores[0], end)
            assert slave.links_opened == 1
    finally:
        for slave in slaves:
            slave.close()
        master.close()
        for store in stores:
            store.close()


def test_the_confirm_position_reaches_the_slave_without_waiting_for_a_heartbeat(
        tmp_path: Path) -> None:
    """The confirm push (the core's CONFIRM_PUSH_DELAY_MS) carries a put's confirm position to
    the slave long before the next heartbeat (30 s here): for a lone put (the first move after
    a quiet spell wakes the tick thread at once) and at the end of a run of puts (moves
    batched: the senders are woken once per CONFIRM_WAKE_INTERVAL_MS, not at every put)."""
    slow = {"heartbeat_interval_ms": 30_000, "housekeeping_interval_ms": 60_000}
    stores = [MessageStore(tmp_path / name, STORE, auto_confirm=False) for name in "ms"]
    master = MasterService(stores[0], ha_config(BrokerRole.SYNC_MASTER, **slow), broker_id=0,
                           endpoint="h:1").start()
    slave = SlaveService(stores[1], ha_config(
        BrokerRole.SLAVE, master_address=f"127.0.0.1:{master.listen_port}", **slow),
        broker_id=1).start()
    try:
        wait_for(lambda: master.stats().sync_state_set == (0, 1))
        for run_length in (1, 50):
            statuses = [put(stores[0], master, b"p%03d" % index) for index in range(run_length)]
            assert statuses == [PutStatus.PUT_OK] * run_length
            end = stores[0].log_position_end
            assert stores[0].confirm_log_position == end
            wait_for(lambda end=end: stores[1].confirm_log_position == end, timeout_s=10)
    finally:
        slave.close()
        master.close()
        for store in stores:
            store.close()
