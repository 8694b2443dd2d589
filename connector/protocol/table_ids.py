"""The Delta application-transaction ids of a topic table: a published format, like the wire.

The broker writes them (ha/broker/table_plan.py) in the same atomic commit as the rows; readers
(connector/spark/read_topic.py, any Delta reader) read them from the table's snapshot to know
where the table ends per queue, so both sides name them from here:

    rocketha/<brokerName>/<queueId>   the next queue offset of that queue not in the table
    rocketha/<brokerName>             the fence: masterEpoch << 32 | sequence
"""

from __future__ import annotations

__all__ = ["APP_ID_PREFIX", "fence_app_id", "queue_app_id"]

APP_ID_PREFIX = "rocketha"


def queue_app_id(broker_name: str, queue_id: int) -> str:
    """The app id whose version is queue `queue_id`'s next offset not in the table."""
    return f"{APP_ID_PREFIX}/{broker_name}/{queue_id}"


def fence_app_id(broker_name: str) -> str:
    """The app id whose version fences the replica set's masters (epoch, sequence)."""
    return f"{APP_ID_PREFIX}/{broker_name}"
