"""Wire status and error codes: one table, shared by the broker and every client.

Every outcome a client can see has a numeric code, a name (RocketMQ's status names where the
concept exists), and two flags: `retriable` (the same request may succeed later, possibly
elsewhere) and `refresh_route` (the client should re-resolve where the topic lives first).
`stored` marks put statuses whose bytes are in the master's log (RocketMQ counts them as sent).

Errors raised to callers form this tree (drawn as httpx does):

    RocketHAError                   any failure with a wire code (`.code`, `.name`, flags)
    ├── RetriableError              retriable=True (SERVICE_NOT_AVAILABLE, NOT_MASTER, BUSY...)
    └── FatalError                  retriable=False (BAD_REQUEST, MESSAGE_ILLEGAL, ...)

Over Arrow Flight an error travels as a FlightServerError (or FlightUnavailableError when
retriable) whose message starts with `rocketha error <code> <NAME>: ` and whose `extra_info`
is the JSON `{"code": <code>, "name": <NAME>, "detail": {...}}`; `decode_flight_error` turns
either form back into the typed exception.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, ClassVar

__all__ = [
    "CODES",
    "FatalError",
    "RetriableError",
    "RocketHAError",
    "StatusCode",
    "code_for",
    "decode_error_text",
    "encode_error_info",
    "error_for_code",
    "status_for",
]


@dataclasses.dataclass(frozen=True, slots=True)
class StatusCode:
    code: int
    name: str
    retriable: bool = False
    refresh_route: bool = False
    stored: bool = False


_TABLE = (
    # put statuses (RocketMQ PutMessageStatus)
    StatusCode(0, "PUT_OK", stored=True),
    StatusCode(1, "FLUSH_DISK_TIMEOUT", stored=True),
    StatusCode(2, "FLUSH_SLAVE_TIMEOUT", stored=True),
    StatusCode(3, "SLAVE_NOT_AVAILABLE", stored=True),
    StatusCode(4, "SERVICE_NOT_AVAILABLE", retriable=True, refresh_route=True),
    StatusCode(5, "CREATE_MAPPED_FILE_FAILED", retriable=True),
    StatusCode(6, "MESSAGE_ILLEGAL"),
    StatusCode(7, "PROPERTIES_SIZE_EXCEEDED"),
    StatusCode(8, "OS_PAGE_CACHE_BUSY", retriable=True),
    StatusCode(9, "UNKNOWN_ERROR", retriable=True),
    StatusCode(10, "IN_SYNC_REPLICAS_NOT_ENOUGH", retriable=True),
    StatusCode(11, "NOT_MASTER", retriable=True, refresh_route=True),
    # an idempotent retry of a batch stored earlier, as durable as PUT_OK, whose positions the
    # broker no longer knows (older than idempotenceBatchesKept, or gone from the log): an
    # acknowledgement that names no position, never a PUT_OK with queue offset -1
    StatusCode(12, "DUPLICATE_POSITION_UNKNOWN", stored=True),
    # request errors
    StatusCode(20, "BAD_REQUEST"),
    StatusCode(21, "TOPIC_NOT_EXIST", refresh_route=True),
    StatusCode(22, "BAD_SCHEMA"),
    StatusCode(23, "BATCH_TOO_LARGE"),
    StatusCode(24, "UNKNOWN_ACTION"),
    StatusCode(25, "NO_PERMISSION"),
    StatusCode(26, "BUSY", retriable=True),
    StatusCode(27, "INTERNAL_ERROR", retriable=True),
    StatusCode(28, "GROUP_NOT_FOUND"),
    StatusCode(29, "UNAUTHENTICATED"),  # no valid signature (NO_PERMISSION: an ACL refused)
    # the client's protocol version and the server's may not run together (conf/protocol.py)
    StatusCode(30, "VERSION_REFUSED"),
    # read statuses (RocketMQ GetMessageStatus)
    StatusCode(40, "FOUND"),
    StatusCode(41, "NO_MATCHED_MESSAGE"),
    StatusCode(42, "MESSAGE_WAS_REMOVING", retriable=True),
    StatusCode(43, "OFFSET_FOUND_NULL"),
    StatusCode(44, "OFFSET_OVERFLOW_ONE"),
    StatusCode(45, "OFFSET_OVERFLOW_BADLY"),
    StatusCode(46, "OFFSET_TOO_SMALL"),
    StatusCode(47, "NO_MESSAGE_IN_QUEUE"),
    StatusCode(48, "NO_MATCHED_LOGIC_QUEUE"),
)
CODES: dict[int, StatusCode] = {entry.code: entry for entry in _TABLE}
_BY_NAME: dict[str, StatusCode] = {entry.name: entry for entry in _TABLE}
assert len(CODES) == len(_BY_NAME) == len(_TABLE)


def status_for(name: str) -> StatusCode:
    """The table entry of a status name (KeyError for an unknown name)."""
    return _BY_NAME[name]


def code_for(name: str) -> int:
    return _BY_NAME[name].code


class RocketHAError(Exception):
    """A failure that has a wire code."""

    retriable: ClassVar[bool] = False

    def __init__(self, status: StatusCode, message: str, detail: dict[str, Any] | None = None):
        super().__init__(f"{status.name}: {message}")
        self.status = status
        self.code = status.code
        self.name = status.name
        self.refresh_route = status.refresh_route
        self.message = message
        self.detail = detail or {}


class RetriableError(RocketHAError):
    retriable: ClassVar[bool] = True


class FatalError(RocketHAError):
    retriable: ClassVar[bool] = False


def error_for_code(code: int, message: str, detail: dict[str, Any] | None = None) -> RocketHAError:
    status = CODES.get(code) or _BY_NAME["UNKNOWN_ERROR"]
    cls = RetriableError if status.retriable else FatalError
    return cls(status, message, detail)


def encode_error_info(name: str, message: str, detail: dict[str, Any] | None = None
                      ) -> tuple[str, bytes]:
    """(message text, extra_info bytes) for a Flight error carrying status `name`."""
    status = _BY_NAME[name]
    text = f"rocketha error {status.code} {status.name}: {message}"
    info = json.dumps({"code": status.code, "name": status.name, "detail": detail or {}})
    return text, info.encode()


_TEXT_PATTERN = re.compile(r"rocketha error (\d+) ([A-Z_]+): (.*?)(?:\. Detail:.*)?$", re.DOTALL)


def decode_error_text(text: str, extra_info: bytes | None = None) -> RocketHAError | None:
    """The typed error inside a Flight error's text/extra_info, or None if it carries none."""
    detail: dict[str, Any] = {}
    if extra_info:
        try:
            info = json.loads(extra_info)
            detail = info.get("detail") or {}
        except (ValueError, AttributeError):
            info = None
    match = _TEXT_PATTERN.search(text)
    if match is None:
        return None
    return error_for_code(int(match.group(1)), match.group(3), detail)
