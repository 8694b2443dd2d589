"""How a broker request is refused: a typed Flight error, and only that call fails.

A handler raises `RequestError(<wire error name>, message)` (or the store's NotMasterError, or
connector.protocol's ProtocolError for a malformed request); `guarded`, wrapped around every
Flight call of BrokerService, turns it into the Flight error the client decodes
(`rocketha error <code> <NAME>: ...`, connector/protocol/errors.py) and counts it for /metrics.
BUSY, SERVICE_NOT_AVAILABLE, NOT_MASTER and INTERNAL_ERROR travel as FlightUnavailableError
(retriable), the rest as FlightServerError. Put statuses (MESSAGE_ILLEGAL, FLUSH_DISK_TIMEOUT...)
are replies, not errors: a produce stream continues past them.

Below: the checks on request fields and names that the handlers share, each raising
RequestError with the field it refuses.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from pyarrow import flight

from connector.protocol import ProtocolError, encode_error_info
from ha.broker.admission import ClosedError
from ha.broker.metadata import TOPICS_TOPIC
from ha.broker.offset_log import OFFSETS_TOPIC
from ha.broker.replication import NotMasterError
from ha.broker.system_log import SystemLogLimitError
from ha.broker.topic_log import TopicLimitError
from storage_engine import PutResult, PutStatus, topic_name_error

__all__ = [
    "RequestError",
    "check_not_internal",
    "check_record_put",
    "check_topic_name",
    "flight_error",
    "guarded",
    "record_limits",
    "request_int",
    "request_string",
]

# the broker service's handlers log under its name, wherever their code sits
logger = logging.getLogger("ha.broker.service")


class RequestError(Exception):
    """Raised inside a handler; turned into a typed Flight error at the boundary."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def flight_error(name: str, message: str) -> flight.FlightError:
    text, info = encode_error_info(name, message)
    if name in ("BUSY", "SERVICE_NOT_AVAILABLE", "NOT_MASTER", "INTERNAL_ERROR"):
        return flight.FlightUnavailableError(text, info)
    return flight.FlightServerError(text, info)


def guarded(method: Callable[..., Any], *, admitted: bool = True) -> Callable[..., Any]:
    """Map RequestError/ProtocolError to typed Flight errors; log unexpected ones. The call
    runs inside the store's admission gate (ha/broker/admission.py) unless `admitted` is
    False (a produce stream enters it per batch: it waits for batches outside)."""

    def wrapper(self: Any, *args: Any) -> Any:
        if not getattr(self, "_ready", False):  # Flight serves before __init__ has finished
            raise flight_error("SERVICE_NOT_AVAILABLE", "the broker is starting")
        try:
            if not admitted:
                return method(self, *args)
            with self.admission.entered():
                return method(self, *args)
        except ClosedError as err:
            raise flight_error("SERVICE_NOT_AVAILABLE", str(err)) from None
        except (RequestError, NotMasterError) as err:
            self._count_error(err.name)
            raise flight_error(err.name, str(err)) from err
        except ProtocolError as err:
            self._count_error("BAD_REQUEST")
            raise flight_error("BAD_REQUEST", str(err)) from err
        except flight.FlightError:
            raise
        except Exception as err:  # shell boundary: report with context, fail this call only
            logger.exception("%s failed", method.__name__)
            self._count_error("INTERNAL_ERROR")
            raise flight_error("INTERNAL_ERROR", type(err).__name__) from None

    wrapper.__name__ = method.__name__
    return wrapper


@contextlib.contextmanager
def record_limits() -> Iterator[None]:
    """A topic or offset change the system log refused before writing, as a wire error: a full
    table is the request's fault, records piling up unacknowledged a reason to retry later."""
    try:
        yield
    except TopicLimitError as err:
        raise RequestError("BAD_REQUEST", str(err)) from err
    except SystemLogLimitError as err:
        raise RequestError("BUSY", str(err)) from err


def check_record_put(result: PutResult, what: str) -> None:
    """A topic or offset record's put that is not PUT_OK fails the request with the put's
    status (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE...: the record may still take effect
    later)."""
    if result.status is not PutStatus.PUT_OK:
        raise RequestError(result.status.name, f"{what}: {result.status.name}"
                           + (f" ({result.error})" if result.error else ""))


def check_not_internal(name: str) -> None:
    if name in (OFFSETS_TOPIC, TOPICS_TOPIC):
        raise RequestError("NO_PERMISSION", f"topic {name!r} is internal (consumer offsets, "
                           "topic configs)")


def check_topic_name(name: str) -> None:
    if topic_name_error(name) is not None:  # the store's rule (storage_engine.names)
        raise RequestError("BAD_REQUEST", f"topic/group name {name[:40]!r} must match "
                           "^[%|a-zA-Z0-9_-]+$ and be at most 127 characters")


def request_string(request: dict[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise RequestError("BAD_REQUEST", f"field {key!r} must be a non-empty string")
    return value


def request_int(request: dict[str, Any], key: str, default: int | None, low: int, high: int) -> int:
    value = request.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError("BAD_REQUEST", f"field {key!r} must be an integer in [{low}, {high}]")
    return value
