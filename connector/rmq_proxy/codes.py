"""Our wire statuses (connector.protocol) -> RocketMQ 5's `apache.rocketmq.v2.Code`.

As RocketMQ's proxy maps its broker's statuses: a put stored on the master but not yet on the
quorum is not OK to a RocketMQ client (it retries it, and the retry, carrying the same message
id, is answered from the brokers' idempotence table once the message is as durable as a
fresh put would be); retriable failures become INTERNAL_SERVER_ERROR (the clients retry), a
busy broker TOO_MANY_REQUESTS (the clients stop retrying). Numbers are the .proto's, so this
module needs no generated code.
"""

from __future__ import annotations

__all__ = ["CODE", "code_for_status"]

CODE = {
    "OK": 20000, "BAD_REQUEST": 40000, "ILLEGAL_TOPIC": 40002, "ILLEGAL_CONSUMER_GROUP": 40003,
    "ILLEGAL_MESSAGE_TAG": 40004, "ILLEGAL_MESSAGE_KEY": 40005, "ILLEGAL_MESSAGE_GROUP": 40006,
    "ILLEGAL_MESSAGE_PROPERTY_KEY": 40007, "ILLEGAL_MESSAGE_ID": 40009,
    "ILLEGAL_FILTER_EXPRESSION": 40010, "ILLEGAL_INVISIBLE_TIME": 40011,
    "ILLEGAL_DELIVERY_TIME": 40012, "INVALID_RECEIPT_HANDLE": 40013,
    "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE": 40014, "UNRECOGNIZED_CLIENT_TYPE": 40015,
    "CLIENT_ID_REQUIRED": 40017, "UNAUTHORIZED": 40100, "FORBIDDEN": 40300,
    "NOT_FOUND": 40400, "MESSAGE_NOT_FOUND": 40401, "TOPIC_NOT_FOUND": 40402,
    "CONSUMER_GROUP_NOT_FOUND": 40403, "REQUEST_TIMEOUT": 40800,
    "MESSAGE_BODY_TOO_LARGE": 41301, "MESSAGE_BODY_EMPTY": 41302,
    "TOO_MANY_REQUESTS": 42900, "MESSAGE_PROPERTIES_TOO_LARGE": 43101,
    "INTERNAL_SERVER_ERROR": 50001, "HA_NOT_AVAILABLE": 50002, "NOT_IMPLEMENTED": 50100,
    "PROXY_TIMEOUT": 50400, "MASTER_PERSISTENCE_TIMEOUT": 50401,
    "SLAVE_PERSISTENCE_TIMEOUT": 50402, "UNSUPPORTED": 50500,
}

_BY_STATUS = {
    "PUT_OK": "OK",
    # stored earlier, offset unknown: a receipt must carry the offset, so not OK (issue 43)
    "DUPLICATE_POSITION_UNKNOWN": "INTERNAL_SERVER_ERROR",
    "FLUSH_DISK_TIMEOUT": "MASTER_PERSISTENCE_TIMEOUT",
    "FLUSH_SLAVE_TIMEOUT": "SLAVE_PERSISTENCE_TIMEOUT",
    "SLAVE_NOT_AVAILABLE": "HA_NOT_AVAILABLE",
    "IN_SYNC_REPLICAS_NOT_ENOUGH": "HA_NOT_AVAILABLE",
    "MESSAGE_ILLEGAL": "BAD_REQUEST",
    "PROPERTIES_SIZE_EXCEEDED": "MESSAGE_PROPERTIES_TOO_LARGE",
    "OS_PAGE_CACHE_BUSY": "TOO_MANY_REQUESTS",
    "BUSY": "TOO_MANY_REQUESTS",
    "TOPIC_NOT_EXIST": "TOPIC_NOT_FOUND",
    "NO_PERMISSION": "FORBIDDEN",  # an ACL refused the user (Pub/Sub on topic or group)
    "UNAUTHENTICATED": "UNAUTHORIZED",  # the user's keys no longer pass (deleted, new secret)
    "BAD_REQUEST": "BAD_REQUEST",
    "BAD_SCHEMA": "BAD_REQUEST",
    "BATCH_TOO_LARGE": "MESSAGE_BODY_TOO_LARGE",
    "GROUP_NOT_FOUND": "CONSUMER_GROUP_NOT_FOUND",
}


def code_for_status(status: str) -> tuple[int, str]:
    """(Code number, Code name) for one of our status names; unknown ones are retriable
    server errors."""
    name = _BY_STATUS.get(status, "INTERNAL_SERVER_ERROR")
    return CODE[name], name
