"""The broker-call retry policy (connector/client/broker_calls.py, on tenacity's Retrying).

Goal: a retriable error is retried, at most retries_max times and never past the send
deadline; a fatal error or any other exception is raised at once, unchanged; each wait is
the jittered backoff (inside its window). A fake call stands for the broker: no process.
"""

from __future__ import annotations

import time

import pytest
import tenacity

from connector import ClientConfig
from connector.client.broker_calls import _Base
from connector.protocol import FatalError, RetriableError, status_for


class Flaky:
    """Fails `failures` times with `error`, then answers "ok"; records when it was called."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.calls = failures, error, []  # type: list[float]

    def __call__(self, endpoint: str) -> str:
        self.calls.append(time.monotonic())
        assert endpoint == "127.0.0.1:1"
        if len(self.calls) <= self.failures:
            raise self.error
        return "ok"


def _base(**config: int) -> _Base:
    return _Base(ClientConfig(brokers=("127.0.0.1:1",), backoff_initial_ms=20,
                              backoff_max_ms=40, **config))


def _busy() -> RetriableError:
    return RetriableError(status_for("SERVICE_NOT_AVAILABLE"), "busy")


def test_a_retriable_error_is_retried_after_jittered_waits() -> None:
    call = Flaky(3, _busy())
    assert _base(retries_max=5, send_deadline_ms=60_000)._retry(call, "test") == "ok"
    assert len(call.calls) == 4
    gaps_ms = [(b - a) * 1000 for a, b in zip(call.calls, call.calls[1:], strict=False)]
    for gap_ms, window_ms in zip(gaps_ms, (20, 40, 40), strict=True):
        assert gap_ms >= window_ms / 2 * 0.9  # never sooner than half the window


def test_retries_stop_at_retries_max_with_the_last_error() -> None:
    call = Flaky(100, _busy())
    with pytest.raises(RetriableError, match="busy"):
        _base(retries_max=2, send_deadline_ms=60_000)._retry(call, "test")
    assert len(call.calls) == 3


def test_retries_stop_before_a_wait_would_pass_the_deadline() -> None:
    call = Flaky(100, _busy())
    with pytest.raises(RetriableError):
        _base(retries_max=1000, send_deadline_ms=100)._retry(call, "test")
    assert call.calls[-1] - call.calls[0] < 0.1 + 0.04  # the last attempt began in time
    assert 2 <= len(call.calls) < 1000


@pytest.mark.parametrize("error", [FatalError(status_for("NO_PERMISSION"), "denied"),
                                   KeyError("a bug")])
def test_a_fatal_error_or_a_bug_is_raised_at_once(error: Exception) -> None:
    call = Flaky(1, error)
    with pytest.raises(type(error)) as raised:
        _base(retries_max=5, send_deadline_ms=60_000)._retry(call, "test")
    assert raised.value is error and len(call.calls) == 1
    assert not isinstance(raised.value, tenacity.RetryError)
