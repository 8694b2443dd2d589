"""Typed values of configuration keys and options: booleans, sizes, durations. One parser each.

Every process spells a boolean the same way (RocketMQ's: `true` or `false`, in any case,
blanks around ignored; nothing else, so `yes` or `1` is an error rather than a silent
false). Sizes are whole bytes (no `k`/`m`/`g` suffix: no key of ours has accepted one, and a
conf file read by RocketMQ's tools must mean the same there). Durations are written as Spark
writes them (its JavaUtils.timeStringAs: `us`, `ms`, `s`, `m`/`min`, `h`, `d`, any case, as in
`500ms`, `30s`, `15m`, `1h`, `7d`), or a bare number of milliseconds; microseconds are cut to
whole milliseconds, as Spark's timeStringAsMs does.

Each parser raises BadValueError, a ValueError whose message names the key (when the caller
passed one) and the value; `reason` is the message without the key, for callers that put
the key in their own error class (`ConfigError(key, ...)`, `OptionError("option x: ...")`).
"""

from __future__ import annotations

import re

__all__ = ["BadValueError", "parse_bool", "parse_duration_ms", "parse_host_port",
           "parse_size_bytes"]

_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_US = {None: 1000, "us": 1, "ms": 1000, "s": 1_000_000, "m": 60_000_000,
                "min": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}


class BadValueError(ValueError):
    """`value` is not what `key` takes; `reason` says what it should be, and shows it."""

    def __init__(self, key: str, value: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}" if key else reason)
        self.key = key
        self.value = value
        self.reason = reason


def parse_bool(text: str, key: str = "") -> bool:
    """`true` or `false` in any case (blanks around ignored).

    Raises:
        BadValueError: anything else ("expected true or false, got 'yes'").
    """
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise BadValueError(key, text, f"expected true or false, got {text!r}")
    return value == "true"


def parse_size_bytes(text: str, key: str = "") -> int:
    """A whole, non-negative number of bytes (blanks around ignored).

    Raises:
        BadValueError: not a decimal integer, or negative.
    """
    value = text.strip()
    if not value.isascii() or not value.isdigit():
        raise BadValueError(key, text, f"expected a size in bytes (a whole number), got {text!r}")
    return int(value)


def parse_duration_ms(text: str, key: str = "") -> int:
    """A duration in milliseconds: `<n>` (ms), or `<n>` with a unit us, ms, s, m, min, h, d.

    Raises:
        BadValueError: anything else.
    """
    match = _DURATION.match(text)
    if match is None:
        raise BadValueError(key, text, f"{text!r} is not a duration like 500ms, 30s, 15m, 1h, "
                            "2d (units: us, ms, s, m, min, h, d)")
    unit = None if match.group(2) is None else match.group(2).lower()
    return int(match.group(1)) * _DURATION_US[unit] // 1000


def parse_host_port(text: str, key: str = "") -> tuple[str, int]:
    """`host:port` (an IPv6 host in brackets, `[::1]:9878`) -> (host, port).

    Each mistake gets its own reason, because "not host:port" alone leaves a user who typed
    `localhost` guessing: a missing port says a port is missing (and shows the form), a port
    that is not a number or not in 1..65535 says that.

    Raises:
        BadValueError: no port, an empty host, a port that is not a number in 1..65535.
    """
    value = text.strip()
    host, sep, port = value.rpartition(":")
    if not sep or not port or (host.startswith("[") is not host.endswith("]")) or (
            ":" in host and not host.startswith("[")):
        example = value.rstrip(":") or "localhost"
        example = f"[{example}]" if ":" in example and not example.startswith("[") else example
        raise BadValueError(key, text, f"{text!r} has no port: expected HOST:PORT "
                            f"(for example {example}:9878)")
    if not host or host == "[]":
        raise BadValueError(key, text, f"{text!r} has no host: expected HOST:PORT")
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadValueError(key, text, f"{text!r}: the port {port!r} is not a number in "
                            "1..65535")
    return host, int(port)

