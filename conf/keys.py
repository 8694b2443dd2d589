"""Typed configuration keys, and the "did you mean" every unknown-key error carries.

A `Key` describes one setting the way a reference page needs it: its RocketMQ-style name,
how its text becomes a value, its default, the values it allows, its unit and a line of
documentation. Key tables (tuples of Key) are data that the docs can be generated from; a
package may keep its own older table shape and still use `unknown_key_message`.

Unknown keys are refused everywhere (a typo must never fall back to a default silently), and
the refusal names the nearest known key, matched case-insensitively (Spark lower-cases option
names), so `listenPrt` or `listenport` both get "did you mean 'listenPort'?".
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Collection
from typing import Any

from conf.values import BadValueError

__all__ = ["Key", "closest_key", "unknown_key_message"]

_CLOSE_ENOUGH = 0.6  # difflib's default cutoff: below it a "suggestion" is noise


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Key:
    """One configuration key.

    Attributes:
        name: its spelling in conf files (`listenPort`).
        parse: text -> value; raises ValueError (BadValueError names key and value).
        default: the value when the key is absent.
        allowed: the only texts accepted (case-insensitive), when the key is an enumeration.
        doc: one line for the reference page.
        unit: what a number counts (`bytes`, `ms`, ...), "" for none.
    """

    name: str
    parse: Callable[[str], Any] = str
    default: Any = None
    allowed: tuple[str, ...] = ()
    doc: str = ""
    unit: str = ""

    def value_of(self, text: str) -> Any:
        """`text` parsed, as this key takes it.

        Raises:
            BadValueError: naming this key and the text (not allowed, or parse refused it).
        """
        if self.allowed and text.strip().lower() not in {a.lower() for a in self.allowed}:
            raise BadValueError(self.name, text, f"expected one of {list(self.allowed)}, "
                                f"got {text!r}")
        try:
            return self.parse(text)
        except BadValueError as err:
            raise BadValueError(self.name, text, err.reason) from err
        except ValueError as err:
            raise BadValueError(self.name, text, f"bad value {text!r}: {err}") from err


def closest_key(name: str, known: Collection[str]) -> str | None:
    """The known key `name` most likely misspells (case-insensitive), None when none is near."""
    by_lower = {key.lower(): key for key in known}
    matches = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=_CLOSE_ENOUGH)
    return by_lower[matches[0]] if matches else None


def unknown_key_message(name: str, known: Collection[str], what: str = "configuration key") -> str:
    """"unknown <what> 'x'; did you mean 'y'?" (the question only when a key is near)."""
    suggestion = closest_key(name, known)
    message = f"unknown {what} {name!r}"
    return f"{message}; did you mean {suggestion!r}?" if suggestion else message
