"""AsyncSender (the asynchronous producer's threads) with a fake round trip at the IO boundary."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from connector.client.async_sender import AsyncSender, SendFuture
from connector.client.producer_core import Batch, ProducerConfig, ProducerCore, SendResult
from connector.errors import ProducerBufferFullError, ProducerClosedError
from connector.protocol import PutReply, RetriableError, status_for


def _sender(run_batch, **overrides: int) -> AsyncSender:  # type: ignore[no-untyped-def]
    config = {"linger_ms": 5, "batch_messages": 100, "batch_bytes": 10_000,
              "max_in_flight": 2, "buffer_bytes": 10_000, "max_block_ms": 200}
    config.update(overrides)
    core = ProducerCore(ProducerConfig(**config), producer_id="p", retries_max=5,
                        send_deadline_ms=5_000, backoff_ms=lambda attempt: 20)
    return AsyncSender(core, run_batch)


def _ok(batch: Batch) -> PutReply:
    return PutReply("PUT_OK", 0, [[0, batch.sequence * 1000, len(batch.messages)]], None, 1)


def _msg(body: bytes = b"x") -> SendFuture:
    return SendFuture(body, None, None, None, 100)


def test_a_sync_send_runs_on_the_callers_thread_and_retries_after_a_backoff() -> None:
    threads = []

    def run(batch: Batch) -> PutReply | RetriableError:
        threads.append(threading.current_thread())
        if len(threads) == 1:
            return RetriableError(status_for("SERVICE_NOT_AVAILABLE"), "down")
        return _ok(batch)

    sender = _sender(run)
    result = sender.send(("t", None), _msg(), inline=True).result(timeout=5)
    assert result.ok and threads[0] is threading.current_thread() and len(threads) == 2
    sender.close()


def test_flush_sends_lingering_batches_and_waits_for_every_result() -> None:
    batches = []

    def run(batch: Batch) -> PutReply:
        batches.append(batch)
        return _ok(batch)

    sender = _sender(run, linger_ms=60_000)
    futures = [sender.send(("t", queue_id % 3), _msg()) for queue_id in range(30)]
    assert not any(future.done() for future in futures)
    assert sender.flush(timeout_s=5)
    assert all(future.result().ok for future in futures)
    assert sorted(len(batch.messages) for batch in batches) == [10, 10, 10]
    assert not futures[0].cancel()  # accepted messages are never withdrawn
    sender.close()
    with pytest.raises(ProducerClosedError):
        sender.send(("t", None), _msg())


def test_a_full_buffer_blocks_for_max_block_ms_then_raises_and_close_fails_the_rest() -> None:
    release = threading.Event()

    def run(batch: Batch) -> PutReply:
        release.wait(10)
        return _ok(batch)

    sender = _sender(run, buffer_bytes=1000, batch_bytes=500, linger_ms=0)
    futures = [sender.send(("t", None), _msg()) for _ in range(10)]
    with pytest.raises(ProducerBufferFullError):
        sender.send(("t", None), _msg())
    release.set()
    assert sender.flush(timeout_s=5)
    assert all(future.result().ok for future in futures)
    sender.close()


def test_send_futures_work_with_the_stdlib_helpers_whether_looked_at_before_or_after() -> None:
    import concurrent.futures._base as base

    from connector.client.async_sender import _FINISHED, _PENDING, _settle_all
    assert (_PENDING, _FINISHED) == (base.PENDING, base.FINISHED)
    untouched, waited, called_back = _msg(), _msg(), _msg()
    seen = []
    called_back.add_done_callback(lambda future: seen.append(future.exception()))
    waiter = threading.Thread(target=lambda: seen.append(waited.result(timeout=5)))
    waiter.start()
    assert not concurrent.futures.wait([waited], timeout=0.05).done
    error = RetriableError(status_for("BUSY"), "busy")
    reply = PutReply("PUT_OK", 0, [[2, 40, 2]], None, 1)  # rows at queue 2, offsets 40, 41
    _settle_all([([untouched, waited], reply), ([called_back], error)])
    waiter.join(5)
    assert untouched._lazy_condition is None  # settled without a Condition ...
    assert untouched.done() and untouched.result() == SendResult("PUT_OK", 2, 40)  # made now
    assert untouched.body is None  # sent: the future no longer holds the body
    assert len(seen) == 2 and error in seen and SendResult("PUT_OK", 2, 41) in seen
    assert not waiter.is_alive()
    assert called_back._lazy_condition is None  # a callback alone needs no Condition
    assert called_back.exception() is error
    with pytest.raises(RetriableError):
        called_back.result()
    late: list[object] = []
    untouched.add_done_callback(late.append)  # after the fact: called at once
    assert late == [untouched]
    assert list(concurrent.futures.as_completed([untouched, waited], timeout=1))


def test_a_callback_runs_exactly_once_however_it_races_the_settling(
        caplog: pytest.LogCaptureFixture) -> None:
    """add_done_callback without a Condition: from other threads while the batch settles,
    before and after; one that raises is logged (as Future does) and the others still run."""
    from connector.client.async_sender import _settle_all

    futures = [_msg() for _ in range(2000)]
    calls: list[SendFuture] = []
    lock = threading.Lock()

    def record(future: SendFuture) -> None:
        with lock:
            calls.append(future)

    def fail(_: SendFuture) -> None:
        raise ValueError("a callback's bug")

    futures[0].add_done_callback(fail)
    started = threading.Barrier(3)

    def add_all() -> None:
        started.wait()
        for future in futures:
            future.add_done_callback(record)

    adders = [threading.Thread(target=add_all) for _ in range(2)]
    for adder in adders:
        adder.start()
    started.wait()
    reply = PutReply("PUT_OK", 0, [[1, 0, len(futures)]], None, 1)
    _settle_all([(futures, reply)])  # type: ignore[list-item]
    for adder in adders:
        adder.join(10)
    assert sorted(map(id, calls)) == sorted(map(id, futures * 2))  # each once per adder
    assert all(future.result() == SendResult("PUT_OK", 1, row)
               for row, future in enumerate(futures))
    assert "a callback's bug" in caplog.text

