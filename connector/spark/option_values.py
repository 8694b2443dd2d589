"""Typed values of Spark options: text -> int, bool, duration, name, choice, JSON string map.

One parser per kind of value, each raising OptionError that names the option and quotes the
value, as pyiceberg's property_as_int does; options.py says which option takes which.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from conf import BadValueError, parse_bool, parse_duration_ms
from connector.errors import OptionError

__all__ = [
    "INT_MAX",
    "NAME_PATTERN",
    "option_bool",
    "option_choice",
    "option_duration_ms",
    "option_int",
    "option_name",
    "option_string_map",
]

NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")  # the broker's topic/group rule
INT_MAX = (1 << 63) - 1


def option_int(values: dict[str, str], name: str, default: int | None, low: int,
               high: int = INT_MAX) -> int | None:
    text = values.get(name)
    if text is None:
        return default
    try:
        number = int(text.strip())
    except ValueError as err:
        raise OptionError(f"option {name}: {text!r} is not an integer") from err
    if not low <= number <= high:
        raise OptionError(f"option {name}: {number} is outside [{low}, {high}]")
    return number


def option_bool(values: dict[str, str], name: str, default: bool) -> bool:
    text = values.get(name)
    if text is None:
        return default
    try:
        return parse_bool(text, f"option {name}")
    except BadValueError as err:
        raise OptionError(str(err)) from err


def option_duration_ms(values: dict[str, str], name: str, default: int, *, low: int = 0) -> int:
    """Milliseconds: a bare number, or with a unit as Spark's timeStringAsMs takes it."""
    text = values.get(name)
    if text is None:
        return default
    try:
        duration_ms = parse_duration_ms(text, f"option {name}")
    except BadValueError as err:
        raise OptionError(str(err)) from err
    if duration_ms < low:
        raise OptionError(f"option {name}: {text!r} is below {low} ms")
    return duration_ms


def option_name(name: str, value: str) -> str:
    if not NAME_PATTERN.match(value):
        raise OptionError(f"option {name}: {value!r} must match ^[%|a-zA-Z0-9_-]+$ "
                          f"(at most 127 characters)")
    return value


def option_choice(values: dict[str, str], name: str, allowed: tuple[str, ...]) -> str:
    text = values.get(name, allowed[0]).strip().lower()
    if text not in allowed:
        raise OptionError(f"option {name}: {values[name]!r} must be one of {', '.join(allowed)}")
    return text


def option_string_map(values: Mapping[str, str], option: str) -> tuple[tuple[str, str], ...]:
    """A JSON object of strings (e.g. S3 endpoint and credentials), sorted key/value pairs."""
    text = values.get(option)
    if text is None:
        return ()
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise OptionError(f"option {option}: not JSON ({str(err)[:100]})") from None
    if not isinstance(parsed, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()):
        raise OptionError(f"option {option}: expected a JSON object of strings")
    return tuple(sorted(parsed.items()))
