"""The wire protocol between clients and brokers: Arrow schemas, tickets, replies, error codes.

A leaf: imports pyarrow and nothing of ours, never pyspark.
"""

from __future__ import annotations

from connector.protocol.errors import (
    CODES,
    FatalError,
    RetriableError,
    RocketHAError,
    StatusCode,
    code_for,
    decode_error_text,
    encode_error_info,
    error_for_code,
    status_for,
)
from connector.protocol.wire import (
    ACTIONS,
    CONSUME_SCHEMA,
    IDEMPOTENCE_PROPERTY,
    PER_BATCH_TOPICS,
    PRODUCE_COLUMNS,
    PRODUCE_SCHEMA,
    GetReply,
    GetTicket,
    ProtocolError,
    PutIdempotence,
    PutReply,
    consume_schema,
    decode_json_object,
    produce_descriptor_command,
)

__all__ = [
    "ACTIONS",
    "CODES",
    "CONSUME_SCHEMA",
    "IDEMPOTENCE_PROPERTY",
    "PER_BATCH_TOPICS",
    "PRODUCE_COLUMNS",
    "PRODUCE_SCHEMA",
    "FatalError",
    "GetReply",
    "GetTicket",
    "ProtocolError",
    "PutIdempotence",
    "PutReply",
    "RetriableError",
    "RocketHAError",
    "StatusCode",
    "code_for",
    "consume_schema",
    "decode_error_text",
    "decode_json_object",
    "encode_error_info",
    "error_for_code",
    "produce_descriptor_command",
    "status_for",
]
