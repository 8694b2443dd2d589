"""The compatibility rule of conf/protocol.py, as a table.

Goal: the one rule every link uses says yes exactly to the same major with minors at most one
apart, treats a missing version as 0.1 (v0.1.0 sends none), and refuses anything else, an
unreadable text included, with one line that names both versions and the docs page. Method:
pure calls, table-driven.
"""

from __future__ import annotations

import pytest

from conf.protocol import (
    DOCS_PAGE,
    LEGACY,
    LOCAL,
    PROTOCOL,
    PeerVersion,
    _local,
    parse_peer_version,
    refusal,
)

HERE = PeerVersion(0, 2, "0.2.0")


@pytest.mark.parametrize("peer, accepted", [
    (None, True),  # v0.1.0: no version at all
    ("", True),
    ("0.1", True),
    ("0.1 0.1.0", True),
    ("0.2 0.2.0.dev0", True),
    ("0.3 0.3.1", True),
    ("0.4 0.4.0", False),  # two minors apart
    ("0.0 0.0.9", False),  # two below
    ("1.2 1.2.0", False),  # another major
    ("1.1", False),
    ("two", False),  # unreadable: never guessed
    ("0.2 has space", False),
    ("0.2.1", False),
    ("9999.1", False),
])
def test_the_rule(peer: str | None, accepted: bool) -> None:
    line = refusal(HERE, peer, "HA link from slave 1")
    assert (line is None) == accepted, line
    if line is not None:
        assert line.startswith("HA link from slave 1 refused: ")
        assert "protocol 0.2 (release 0.2.0)" in line and DOCS_PAGE in line
        assert "\n" not in line


def test_the_line_names_both_versions() -> None:
    line = refusal(HERE, "0.4 0.4.0", "broker b at h:1")
    assert line == ("broker b at h:1 refused: the peer speaks protocol 0.4 (release 0.4.0), this "
                    "process protocol 0.2 (release 0.2.0); they cannot run together (same "
                    f"major, minors at most 1 apart; see {DOCS_PAGE})")
    assert "protocol 0.1 (release 0.1.x)" in (refusal(PeerVersion(0, 3, "x"), None, "l") or "")


def test_text_round_trip_and_absence() -> None:
    assert parse_peer_version(None) == LEGACY == parse_peer_version("")
    assert parse_peer_version(HERE.text()) == HERE
    assert parse_peer_version("0.2") == PeerVersion(0, 2, "")
    assert (LOCAL.major, LOCAL.minor) == PROTOCOL
    assert parse_peer_version(LOCAL.text()) == LOCAL


def test_only_the_test_variable_changes_the_local_version() -> None:
    assert (_local({}).major, _local({}).minor) == PROTOCOL
    faked = _local({"ROCKETHA_TEST_PROTOCOL": "0.4"})
    assert (faked.major, faked.minor) == (0, 4) and faked.release.endswith("+test")
