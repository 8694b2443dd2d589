"""The one reader of RocketMQ's `key=value` configuration files (Java properties syntax).

Every process reads its conf file, its client.properties, credentials files and `--set-file`
through `parse_properties`; each package turns a PropertiesError into its own ConfigError at the
call site, so its callers see the error class they always saw.

The syntax (java.util.Properties.load, minus what no conf of ours needs):

    # comment                  a line whose first non-blank character is `#` or `!`
    key=value                  the key ends at the first unescaped `=`, `:` or blank;
    key: value                 blanks around the separator are skipped, and one `=` or `:`
    key value                  after them too (so `key = value` and `key value` are the same)
    key=first \\               a line ending in an odd number of backslashes continues on the
        second                 next one, whose leading blanks are dropped: value "first second"
    key=a\\tb\\u00e9\\\\          escapes: \\t \\n \\r \\f, \\uXXXX, and `\\x` is x for any other x
                               (so `\\=`, `\\:`, `\\ ` and `\\#` put those characters in a key)

Line ends are \\n, \\r\\n or \\r (as Java; not Python's splitlines, which also breaks on \\v,
\\x1c ...). Blanks are space, tab and form feed. Unlike Java, trailing blanks of a value are
dropped (every parser here stripped values, and a stray blank after `true` is no reason to
refuse a file): an escaped trailing blank (`\\ `) stays.

Also unlike Java, three things are errors, each naming the source and line: a key repeated
(Java keeps the last silently, so one of two conflicting settings would be ignored), a key
with no separator and no value (`justakey`: a truncated line, not an empty setting) or no key
(`=value`), and a malformed `\\u` escape.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["PropertiesError", "format_property", "parse_properties", "read_properties_file",
           "set_property"]

_LINE_END = re.compile(r"\r\n|\r|\n")
_LINE_END_KEPT = re.compile(r"(\r\n|\r|\n)")
_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class PropertiesError(ValueError):
    """A properties text that cannot be read: `location` is "source:line", `reason` why."""

    def __init__(self, source: str, line_number: int, reason: str) -> None:
        super().__init__(f"{source}:{line_number}: {reason}")
        self.source = source
        self.line_number = line_number
        self.reason = reason

    @property
    def location(self) -> str:
        return f"{self.source}:{self.line_number}"


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """The settings of a properties text, in file order.

    Args:
        text: the whole file.
        source: what errors call it (a path, "--set-file x", ...).
    Returns:
        key -> value, both unescaped; values without trailing blanks.
    Raises:
        PropertiesError: a duplicate key, a line that is not a setting, a bad `\\u` escape.
    """
    properties: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for line_number, logical in _logical_lines(text):
        key, value = _split_setting(logical, source, line_number)
        if key in properties:
            raise PropertiesError(source, line_number, f"duplicate key {key!r} (first set on "
                                  f"line {first_line[key]})")
        properties[key] = value
        first_line[key] = line_number
    return properties


def read_properties_file(path: str | Path) -> dict[str, str]:
    """`parse_properties` of a file (UTF-8), its path as the source. Raises OSError too."""
    return parse_properties(Path(path).read_text(encoding="utf-8"), str(path))


def format_property(key: str, value: str) -> str:
    """One `key=value` line that `parse_properties` reads back as exactly (key, value)."""
    escaped_key = "".join("\\" + char if char in "=: \t\f#!\\" else _escape_control(char)
                          for char in key)
    last = len(value) - 1
    escaped_value = "".join(
        "\\\\" if char == "\\"
        # a blank first (the separator's) or last (trailing) would be dropped unescaped
        else "\\" + char if char in _BLANKS and index in (0, last)
        else _escape_control(char)
        for index, char in enumerate(value))
    return f"{escaped_key}={escaped_value}"


def set_property(text: str, key: str, value: str, source: str = "<properties>") -> str:
    """`text` with `key` set to `value`, everything else (comments, blank lines, other
    settings, their order and line ends) as it was.

    The setting's line (all its physical lines, if it continues) becomes one
    `format_property` line in its place; a key the text does not set is appended at the end.
    Raises PropertiesError if `text` itself cannot be read (nothing is rewritten then).
    """
    parse_properties(text, source)  # a text we could not read back is not ours to edit
    pieces = _LINE_END_KEPT.split(text)  # line, end, line, end, ..., last line
    lines, ends = pieces[0::2], [*pieces[1::2], ""]
    line = format_property(key, value)
    span = _span_of(lines, key, source)
    if span is not None:
        first, last = span
        kept = [body + end for body, end in zip(lines, ends, strict=True)]
        return "".join([*kept[:first], line + ends[last], *kept[last + 1:]])
    newline = "\r\n" if "\r\n" in text else "\n"
    if text and not text.endswith(("\n", "\r")):
        text += newline
    return f"{text}{line}{newline}"


def _span_of(lines: list[str], key: str, source: str) -> tuple[int, int] | None:
    """(first, last) physical line index of the setting of `key`, or None."""
    start: int | None = None
    for index, physical in enumerate(lines):
        stripped = physical.lstrip(_BLANKS)
        if start is None:
            if not stripped or stripped[0] in "#!":
                continue
            start = index
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1 and index + 1 < len(lines):
            continue
        logical = _logical_lines("\n".join(lines[start:index + 1]))[0][1]
        if _split_setting(logical, source, start + 1)[0] == key:
            return start, index
        start = None
    return None


def _escape_control(char: str) -> str:
    for letter, control in _ESCAPES.items():
        if char == control:
            return "\\" + letter
    return char


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(number of the first physical line, logical line) for each non-blank, non-comment
    line, continuations joined (a continuation line's leading blanks dropped)."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start_number = 0
    for number, physical in enumerate(_LINE_END.split(text), start=1):
        stripped = physical.lstrip(_BLANKS)
        if not pending:
            if not stripped or stripped[0] in "#!":
                continue
            start_number = number
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        lines.append((start_number, "".join(pending)))
        pending = []
    if pending:  # the text ends inside a continuation: Java takes what there is
        lines.append((start_number, "".join(pending)))
    return lines


def _split_setting(line: str, source: str, line_number: int) -> tuple[str, str]:
    """(key, value) of one logical line: the key up to the first unescaped `=`, `:` or
    blank, then blanks, one optional `=`/`:`, blanks, and the value."""
    position = 0
    while position < len(line):
        char = line[position]
        if char == "\\":
            position += 2
            continue
        if char in "=:" or char in _BLANKS:
            break
        position += 1
    key = _unescape(line[:position], source, line_number)
    rest = line[position:].lstrip(_BLANKS)
    separated = rest[:1] in ("=", ":")
    if separated:
        rest = rest[1:].lstrip(_BLANKS)
    if not key:
        raise PropertiesError(source, line_number, f"no key before the value: {line[:80]!r}")
    if not separated and not rest:
        raise PropertiesError(source, line_number, f"expected key=value, key: value or key "
                              f"value, got {line[:80]!r}")
    return key, _unescape(rest, source, line_number, strip_trailing=True)


def _unescape(text: str, source: str, line_number: int, *, strip_trailing: bool = False) -> str:
    """`text` with its escapes resolved; with `strip_trailing`, without its trailing
    unescaped blanks."""
    out: list[str] = []
    kept = 0  # len(out) up to the last character that is not a trailing unescaped blank
    position = 0
    while position < len(text):
        char = text[position]
        position += 1
        if char != "\\":
            out.append(char)
            if char not in _BLANKS:
                kept = len(out)
            continue
        if position == len(text):  # a lone backslash at the very end: Java drops it
            break
        char = text[position]
        position += 1
        if char == "u":
            digits = text[position:position + 4]
            if len(digits) != 4 or not set(digits) <= _HEX_DIGITS:
                raise PropertiesError(source, line_number,
                                      f"malformed \\uXXXX escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            position += 4
        else:
            out.append(_ESCAPES.get(char, char))
        kept = len(out)
    return "".join(out[:kept] if strip_trailing else out)
