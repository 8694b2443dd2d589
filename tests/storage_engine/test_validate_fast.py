"""MessageStore._validate's single-message fast path accepts exactly what the general checks
accept, and leaves everything else (with its reason) to them.

Goal: a put of one message skips the general validation's closure, loop and set only when each
of its checks would pass. Method: hypothesis batches of 0-3 messages with hostile fields (bad
topic names, queue ids out of range or of the wrong type, bodies that are str or too large,
columns of the wrong length), each judged by `_validate` and by `_validate_any`: the same
verdict (None, or MESSAGE_ILLEGAL with the same reason), or the same exception type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine import MessageBatch, MessageStore, StoreConfig

_topics = st.one_of(st.sampled_from(["t", "latency", "a%b|c-d_e", "", "bad topic", "x" * 128]),
                    st.text(max_size=5))
_queue_ids = st.one_of(st.integers(min_value=-2, max_value=65537), st.sampled_from([
    0, 65535, True, 1.5, None, "1"]))
_bodies = st.one_of(st.binary(max_size=40), st.text(max_size=3), st.just(b"y" * 70))
_columns = st.one_of(st.none(), st.lists(st.one_of(st.none(), st.text(max_size=3)), max_size=3))


def _verdict(validate: Any, batch: MessageBatch) -> Any:
    try:
        result = validate(batch)
    except Exception as err:  # noqa: BLE001 - compared, not swallowed
        return type(err)
    return None if result is None else (result.status, result.error)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_topics, st.lists(_bodies, max_size=3), st.lists(_queue_ids, min_size=1, max_size=3),
       _columns, _columns, st.one_of(st.none(), st.just([{"a": "b"}])))
def test_fast_path_agrees_with_the_general_checks(
        tmp_path: Path, topic: str, bodies: list[Any], queue_ids: list[Any], tags: Any,
        keys: Any, properties: Any) -> None:
    with MessageStore(tmp_path, StoreConfig(message_size_max_bytes=64)) as store:
        batch = MessageBatch(topic=topic, bodies=bodies, queue_ids=queue_ids, tags=tags,
                             keys=keys, properties=properties)
        assert _verdict(store._validate, batch) == _verdict(store._validate_any, batch)


def test_a_single_send_passes(tmp_path: Path) -> None:
    with MessageStore(tmp_path, StoreConfig()) as store:
        assert store._validate(MessageBatch(topic="latency", bodies=[b"x" * 100],
                                            queue_ids=[3])) is None
