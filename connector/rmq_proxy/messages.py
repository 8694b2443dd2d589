"""RocketMQ 5 messages (protobuf) <-> rocketha rows, so both worlds share one set of topics.

    RocketMQ (apache.rocketmq.v2.Message)      rocketha row (PRODUCE_SCHEMA / CONSUME_SCHEMA)
    body (IDENTITY; GZIP is inflated)          body
    system_properties.keys  ["k1", "k2"]       key "k1 k2"        (stored as KEYS, as RocketMQ)
    system_properties.tag                      tags               (stored as TAGS)
    system_properties.message_id               property UNIQ_KEY  (RocketMQ's name for it)
    system_properties.message_group            property __SHARDINGKEY (RocketMQ's name)
    user_properties                            properties
A row written by a Flight producer has no UNIQ_KEY: its RocketMQ message id is the broker's
msg_id (store host + log position), so it is still unique and stable across deliveries.
Properties that carry these system fields (and our idempotence marker) are reserved: a client
may not set them as user properties (ILLEGAL_MESSAGE_PROPERTY_KEY).
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2

from connector.protocol import IDEMPOTENCE_PROPERTY

__all__ = [
    "RESERVED_PROPERTIES",
    "SHARDING_KEY",
    "InvalidMessage",
    "ProduceRow",
    "to_pb_message",
    "to_produce_row",
]

UNIQ_KEY = "UNIQ_KEY"
SHARDING_KEY = "__SHARDINGKEY"
RESERVED_PROPERTIES = frozenset({"KEYS", "TAGS", UNIQ_KEY, SHARDING_KEY, IDEMPOTENCE_PROPERTY})
MESSAGE_ID_CHARS_MAX = 64
TAG_CHARS_MAX = 1024
KEY_CHARS_MAX = 4096
MESSAGE_GROUP_CHARS_MAX = 64  # RocketMQ's proxy default (maxMessageGroupSize)


class InvalidMessage(ValueError):
    """A message the proxy refuses; `code_name` is the apache.rocketmq.v2.Code to answer."""

    def __init__(self, code_name: str, message: str) -> None:
        super().__init__(message)
        self.code_name = code_name


@dataclasses.dataclass(frozen=True, slots=True)
class ProduceRow:
    topic: str
    message_id: str
    body: bytes
    key: str | None
    tags: str | None
    properties: dict[str, str]
    message_group: str | None


def to_produce_row(message: Any, body_bytes_max: int) -> ProduceRow:
    """Check one SendMessage message and turn it into a row; InvalidMessage otherwise."""
    system = message.system_properties
    kind = system.message_type
    if kind in (definition_pb2.DELAY, definition_pb2.TRANSACTION, definition_pb2.LITE,
                definition_pb2.PRIORITY) or system.HasField("delivery_timestamp"):
        raise InvalidMessage("UNSUPPORTED", f"{definition_pb2.MessageType.Name(kind)} messages "
                             "(delay, transaction, lite, priority) are not supported by "
                             "rocketha; send NORMAL or FIFO messages")
    group = system.message_group if system.HasField("message_group") else None
    if kind == definition_pb2.FIFO and not group:
        raise InvalidMessage("ILLEGAL_MESSAGE_GROUP", "a FIFO message needs a message group")
    if group and (len(group) > MESSAGE_GROUP_CHARS_MAX or not group.isprintable()):
        raise InvalidMessage("ILLEGAL_MESSAGE_GROUP", f"message group {group[:80]!r} must be "
                             f"1..{MESSAGE_GROUP_CHARS_MAX} printable characters")
    if kind == definition_pb2.NORMAL and group:
        raise InvalidMessage("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",
                             "a NORMAL message cannot have a message group (send it as FIFO)")
    message_id = system.message_id
    if not message_id or len(message_id) > MESSAGE_ID_CHARS_MAX or not message_id.isascii() \
            or "/" in message_id or not message_id.isprintable():
        raise InvalidMessage("ILLEGAL_MESSAGE_ID", f"message id {message_id[:80]!r} must be 1.."
                             f"{MESSAGE_ID_CHARS_MAX} printable ASCII characters without '/'")
    body = bytes(message.body)
    if system.body_encoding == definition_pb2.GZIP:
        inflater = zlib.decompressobj(wbits=31)
        try:
            body = inflater.decompress(body, body_bytes_max + 1)
        except zlib.error as err:
            raise InvalidMessage("BAD_REQUEST", f"GZIP body does not inflate: {err}") from None
    if not body:
        raise InvalidMessage("MESSAGE_BODY_EMPTY", "the message body is empty")
    if len(body) > body_bytes_max:
        raise InvalidMessage("MESSAGE_BODY_TOO_LARGE", f"message body of {len(body)} bytes "
                             f"exceeds {body_bytes_max} (grpcMaxBodyBytes)")
    tag = system.tag if system.HasField("tag") else None
    if tag is not None and (not tag.strip() or "|" in tag or len(tag) > TAG_CHARS_MAX):
        raise InvalidMessage("ILLEGAL_MESSAGE_TAG", f"tag {tag[:80]!r} must be non-blank, "
                             f"without '|', at most {TAG_CHARS_MAX} characters")
    keys = list(system.keys)
    if any(not k.strip() or " " in k for k in keys) or len(" ".join(keys)) > KEY_CHARS_MAX:
        raise InvalidMessage("ILLEGAL_MESSAGE_KEY", "keys must be non-blank, without spaces, "
                             f"at most {KEY_CHARS_MAX} characters together")
    properties = dict(message.user_properties)
    reserved = RESERVED_PROPERTIES & properties.keys()
    if reserved:
        raise InvalidMessage("ILLEGAL_MESSAGE_PROPERTY_KEY",
                             f"user properties {sorted(reserved)} are reserved")
    if any("\x01" in k or "\x02" in k or "\x01" in v or "\x02" in v
           for k, v in properties.items()):
        raise InvalidMessage("ILLEGAL_MESSAGE_PROPERTY_KEY",
                             "property names and values cannot hold \\x01 or \\x02")
    properties[UNIQ_KEY] = message_id
    if group:
        properties[SHARDING_KEY] = group
    return ProduceRow(message.topic.name, message_id, body, " ".join(keys) or None, tag,
                      properties, group)


def _timestamp(milliseconds: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(int(milliseconds))
    return stamp


def to_pb_message(row: dict[str, Any], topic: str, namespace: str, *, receipt_handle: str,
                  delivery_attempt: int, invisible_ms: int, broker_name: str) -> Any:
    """One consumed row (CONSUME_SCHEMA dict, timestamps as datetime) as a Message."""
    message = definition_pb2.Message()
    message.topic.name = topic
    message.topic.resource_namespace = namespace
    body = row["body"] or b""
    message.body = body
    properties = dict(row.get("properties") or [])
    properties.pop(IDEMPOTENCE_PROPERTY, None)
    message_id = properties.pop(UNIQ_KEY, None) or row.get("msg_id") or \
        f"{broker_name}-{row['queue_id']}-{row['queue_offset']}"
    group = properties.pop(SHARDING_KEY, None)
    for name, value in properties.items():
        message.user_properties[name] = value
    system = message.system_properties
    system.message_id = message_id
    if row.get("tags"):
        system.tag = row["tags"]
    if row.get("key"):
        system.keys.extend(part for part in row["key"].split(" ") if part)
    system.message_type = definition_pb2.FIFO if group else definition_pb2.NORMAL
    if group:
        system.message_group = group
    system.body_encoding = definition_pb2.IDENTITY
    system.body_digest.type = definition_pb2.CRC32
    system.body_digest.checksum = format(zlib.crc32(body) & 0xFFFFFFFF, "08X")
    for field, value in (("born_timestamp", row.get("born_timestamp")),
                         ("store_timestamp", row.get("store_timestamp"))):
        if value is not None:
            getattr(system, field).CopyFrom(_timestamp(value.timestamp() * 1000))
    system.born_host = ""
    system.store_host = broker_name
    system.queue_id = int(row["queue_id"])
    system.queue_offset = int(row["queue_offset"])
    system.receipt_handle = receipt_handle
    system.delivery_attempt = delivery_attempt
    system.invisible_duration.FromMilliseconds(invisible_ms)
    return message
