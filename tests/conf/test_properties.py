"""The one properties reader (conf/properties.py): every syntax form, continuations, escapes,
and errors that name the source and line.

Method: small texts parsed directly, one behaviour per case; the writer (`format_property`)
is checked by round-trips, including hypothesis-free edge values (blanks at either end,
backslashes, line ends, separators in keys)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conf import (
    PropertiesError,
    format_property,
    parse_properties,
    read_properties_file,
    set_property,
)


@pytest.mark.parametrize(("line", "key", "value"), [
    ("key=value", "key", "value"),
    ("key = value", "key", "value"),
    ("key: value", "key", "value"),
    ("key:value", "key", "value"),
    ("key value", "key", "value"),
    ("key\tvalue", "key", "value"),
    ("   key=value   ", "key", "value"),
    ("key=", "key", ""),
    ("key =", "key", ""),
    ("key = = v", "key", "= v"),
    ("addr=127.0.0.1:9876;h:1", "addr", "127.0.0.1:9876;h:1"),
    ("key=a # not a comment", "key", "a # not a comment"),
    ("tls.server.mode=enforcing", "tls.server.mode", "enforcing"),
])
def test_each_setting_form(line: str, key: str, value: str) -> None:
    assert parse_properties(line) == {key: value}


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# one\n! two\n   # indented\n\n \t \na=1\n"
    assert parse_properties(text) == {"a": "1"}


def test_line_ends_are_java_ones() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3\nd=4") == {"a": "1", "b": "2", "c": "3", "d": "4"}
    # Python's splitlines() would break here too; Java (and we) do not
    assert parse_properties("a=x\x0by\x1cz") == {"a": "x\x0by\x1cz"}


def test_continuation_lines() -> None:
    text = "list=one, \\\n     two, \\\n\tthree\nnext=1\n"
    assert parse_properties(text) == {"list": "one, two, three", "next": "1"}


def test_even_backslashes_do_not_continue() -> None:
    assert parse_properties("path=C:\\\\\nnext=1") == {"path": "C:\\", "next": "1"}
    assert parse_properties("a=x\\\\\\\ny") == {"a": "x\\y"}


def test_a_continued_line_that_looks_like_a_comment_is_value() -> None:
    assert parse_properties("a=1\\\n# still a\nb=2") == {"a": "1# still a", "b": "2"}


def test_continuation_at_end_of_text_takes_what_there_is() -> None:
    assert parse_properties("a=1\\") == {"a": "1"}


def test_escapes() -> None:
    text = "a=tab\\there\nb=line\\nend\nc=\\u00e9\\u20AC\nd=back\\\\slash\ne=\\q\nf=\\#x\n"
    assert parse_properties(text) == {"a": "tab\there", "b": "line\nend", "c": "é€",
                                      "d": "back\\slash", "e": "q", "f": "#x"}


def test_escaped_separators_belong_to_the_key() -> None:
    assert parse_properties("a\\=b\\:c\\ d=v") == {"a=b:c d": "v"}


def test_trailing_blanks_are_dropped_but_escaped_ones_stay() -> None:
    assert parse_properties("a=x   \nb=y\\ \nc=\\ z") == {"a": "x", "b": "y ", "c": " z"}


@pytest.mark.parametrize(("text", "line_number", "reason"), [
    ("a=1\njustakey\n", 2, "expected key=value"),
    ("a=1\n\n  key  \n", 3, "expected key=value"),
    ("=value", 1, "no key"),
    (": value", 1, "no key"),
    ("# c\na=\\u12", 2, "malformed \\\\uXXXX"),
    ("a=\\uZZZZ", 1, "malformed"),
    ("a=1\nb=2\na=3", 3, "duplicate key 'a' \\(first set on line 1\\)"),
    ("a=1\\\n  more\nb=2\\\n c\nb=3", 5, "duplicate key 'b' \\(first set on line 3\\)"),
])
def test_errors_name_source_and_line(text: str, line_number: int, reason: str) -> None:
    with pytest.raises(PropertiesError, match=f"^broker.conf:{line_number}: {reason}") as caught:
        parse_properties(text, "broker.conf")
    assert caught.value.location == f"broker.conf:{line_number}"
    assert caught.value.line_number == line_number
    assert isinstance(caught.value, ValueError)


def test_read_properties_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "x.conf"
    path.write_text("a=1\nbad\n", encoding="utf-8")
    with pytest.raises(PropertiesError, match=f"^{path}:2: "):
        read_properties_file(path)
    path.write_text("a = é\n", encoding="utf-8")
    assert read_properties_file(path) == {"a": "é"}


@pytest.mark.parametrize(("key", "value"), [
    ("plain", "value"),
    ("a b=c:d#!", "v"),
    ("#leading", "!x"),
    ("k", ""),
    ("k", " "),
    ("k", "  both ends\t"),
    ("k", "back\\slash\\"),
    ("k", "multi\nline\r\nvalue\f"),
    ("k", "\\u0041 is not an escape here"),
    ("k", "é€ unicode"),
])
def test_format_property_round_trips(key: str, value: str) -> None:
    line = format_property(key, value)
    assert "\n" not in line and "\r" not in line
    assert parse_properties(line) == {key: value}


CONF = ("# identity\r\nbrokerName=broker-a\r\n\r\n! old style comment\r\nputRowsMax = 10 \\\r\n"
        "    24\r\n#putRowsMax=9\r\nunknownToUs=kept\r\n")


def test_set_property_replaces_the_setting_and_keeps_everything_else() -> None:
    text = set_property(CONF, "putRowsMax", "2048")
    assert text == CONF.replace("putRowsMax = 10 \\\r\n    24\r\n", "putRowsMax=2048\r\n")
    assert parse_properties(text) == {"brokerName": "broker-a", "putRowsMax": "2048",
                                      "unknownToUs": "kept"}


def test_set_property_appends_a_new_key_with_the_text_s_line_end() -> None:
    assert set_property(CONF, "listenPort", "1") == CONF + "listenPort=1\r\n"
    assert set_property("a=1", "b", " x\\") == "a=1\nb=\\ x\\\\\n"
    assert parse_properties(set_property("a=1", "b", " x\\"))["b"] == " x\\"
    assert set_property("", "a", "1") == "a=1\n"


def test_set_property_finds_keys_in_their_escaped_and_spaced_forms() -> None:
    text = "a\\=b : 1\nkey\tv\n"
    assert set_property(text, "a=b", "2") == "a\\=b=2\nkey\tv\n"
    assert set_property(text, "key", "w") == "a\\=b : 1\nkey=w\n"


def test_set_property_refuses_a_text_it_cannot_read() -> None:
    with pytest.raises(PropertiesError, match="duplicate key 'a'"):
        set_property("a=1\na=2\n", "b", "3")
