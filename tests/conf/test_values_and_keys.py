"""Value parsers (conf/values.py) and typed keys with "did you mean" (conf/keys.py).

Method: table-driven calls; every error is checked for the key and the value it must name."""

from __future__ import annotations

import pytest

from conf import (
    BadValueError,
    Key,
    closest_key,
    parse_bool,
    parse_duration_ms,
    parse_size_bytes,
    unknown_key_message,
)


@pytest.mark.parametrize(("text", "value"), [
    ("true", True), ("false", False), ("TRUE", True), ("False", False), (" true\t", True),
])
def test_parse_bool_accepts_true_and_false_in_any_case(text: str, value: bool) -> None:
    assert parse_bool(text) is value


@pytest.mark.parametrize("text", ["yes", "no", "1", "0", "", "on", "t", "truee"])
def test_parse_bool_refuses_everything_else_naming_key_and_value(text: str) -> None:
    with pytest.raises(BadValueError) as caught:
        parse_bool(text, "slaveReadEnable")
    assert str(caught.value) == f"slaveReadEnable: expected true or false, got {text!r}"
    assert (caught.value.key, caught.value.value) == ("slaveReadEnable", text)
    assert caught.value.reason == f"expected true or false, got {text!r}"
    with pytest.raises(ValueError, match=r"^expected true or false"):
        parse_bool(text)  # no key: the caller's error class names it


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("1048576", 1 << 20), (" 42 ", 42)])
def test_parse_size_bytes(text: str, value: int) -> None:
    assert parse_size_bytes(text) == value


@pytest.mark.parametrize("text", ["-1", "1k", "1.5", "", "1 000", "١٢"])
def test_parse_size_bytes_refuses_suffixes_and_signs(text: str) -> None:
    with pytest.raises(BadValueError, match=r"^maxMessageSize: expected a size in bytes"):
        parse_size_bytes(text, "maxMessageSize")


@pytest.mark.parametrize(("text", "value"), [
    ("250", 250), ("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("15min", 900_000),
    ("1h", 3_600_000), (" 2 s ", 2000), ("1d", 86_400_000), ("15MIN", 900_000),
    ("1500us", 1),  # Spark's timeStringAsMs cuts microseconds to whole milliseconds
])
def test_parse_duration_ms(text: str, value: int) -> None:
    assert parse_duration_ms(text) == value


@pytest.mark.parametrize("text", ["soon", "1w", "-5s", "1.5s", "", "s", "5 minutes"])
def test_parse_duration_ms_refuses_naming_key_and_value(text: str) -> None:
    with pytest.raises(BadValueError, match=f"^option maxTriggerDelay: {text!r} is not a "
                       "duration"):
        parse_duration_ms(text, "option maxTriggerDelay")


KNOWN = ["listenPort", "haListenPort", "brokerName", "brokerClusterName", "flushDiskType"]


@pytest.mark.parametrize(("name", "suggestion"), [
    ("listenPrt", "listenPort"),
    ("listenport", "listenPort"),  # case-insensitive (Spark lower-cases option names)
    ("LISTENPORT", "listenPort"),
    ("brokername", "brokerName"),
    ("flushDiskTyp", "flushDiskType"),
    ("somethingElse", None),
])
def test_closest_key(name: str, suggestion: str | None) -> None:
    assert closest_key(name, KNOWN) == suggestion


def test_unknown_key_message() -> None:
    assert unknown_key_message("listenPrt", KNOWN) == (
        "unknown configuration key 'listenPrt'; did you mean 'listenPort'?")
    assert unknown_key_message("zzz", KNOWN) == "unknown configuration key 'zzz'"
    assert unknown_key_message("subscibe", ["subscribe"], "option") == (
        "unknown option 'subscibe'; did you mean 'subscribe'?")
    assert unknown_key_message("x", []) == "unknown configuration key 'x'"


def test_key_value_of_names_the_key() -> None:
    port = Key(name="listenPort", parse=int, default=10911, doc="client port", unit="port")
    assert port.value_of(" 10912 ") == 10912
    with pytest.raises(BadValueError, match=r"^listenPort: bad value 'x'"):
        port.value_of("x")
    enabled = Key(name="tieredStoreEnable", parse=parse_bool, default=False)
    with pytest.raises(BadValueError, match=r"^tieredStoreEnable: expected true or false"):
        enabled.value_of("yes")
    role = Key(name="brokerRole", default="ASYNC_MASTER",
               allowed=("SYNC_MASTER", "ASYNC_MASTER", "SLAVE"))
    assert role.value_of("SLAVE") == "SLAVE"
    with pytest.raises(BadValueError, match=r"^brokerRole: expected one of"):
        role.value_of("LEADER")


def test_keys_are_frozen() -> None:
    key = Key(name="a")
    with pytest.raises(AttributeError):
        key.name = "b"  # type: ignore[misc]
