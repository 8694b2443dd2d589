"""The controller-leader search (conf/controller_addresses.py) as tables.

Goal: the one policy the client library, a broker's controller link and the operator tool use
to find the controller leader: which address is asked next for each answer, that every search
ends within passes x starts x (hops + 1) calls whatever the controllers say (hint loops,
stale hints, every node down), and that a failed search names every address it tried.
Method: a scripted cluster (address -> the answers it gives, in turn) drives LeaderSearch the
way the callers do; no sockets, no clock.
"""

from __future__ import annotations

import pytest

from conf.controller_addresses import (
    ANSWERED,
    Answer,
    LeaderSearch,
    NotLeader,
    Unavailable,
    controller_addresses,
)

DOWN = Unavailable("connection refused")


def _run(search: LeaderSearch, answers: dict[str, list[Answer]]) -> list[str]:
    """Drive the search; the calls made, a `~` before one that came after a pause."""
    calls: list[str] = []
    while (step := search.next_address()) is not None:
        calls.append(("~" if step.pause_first else "") + step.address)
        script = answers[step.address]
        search.on_answer(step.address, script.pop(0) if len(script) > 1 else script[0])
    return calls


@pytest.mark.parametrize("text, expected", [
    ("a:1;b:2;c:3", ("a:1", "b:2", "c:3")),
    ("a:1, b:2,", ("a:1", "b:2")),
    (" a:1 ; ;b:2", ("a:1", "b:2")),
    ("", ()),
    (None, ()),
])
def test_addresses_parse_either_separator(text: str | None, expected: tuple[str, ...]) -> None:
    assert controller_addresses(text) == expected


CASES = [
    # (why, configured, answers, hops_max, passes_max, preferred, calls, leader)
    ("the first address leads", ["a", "b"], {"a": [ANSWERED]}, 3, 1, None, ["a"], "a"),
    ("a follower's hint is followed", ["a", "b", "c"],
     {"a": [NotLeader("c")], "c": [ANSWERED]}, 3, 1, None, ["a", "c"], "c"),
    ("a hint outside the list is followed", ["a"],
     {"a": [NotLeader("z")], "z": [ANSWERED]}, 3, 1, None, ["a", "z"], "z"),
    ("no hint: the next configured address", ["a", "b"],
     {"a": [NotLeader(None)], "b": [ANSWERED]}, 3, 1, None, ["a", "b"], "b"),
    ("a hint naming the node itself is no hint", ["a", "b"],
     {"a": [NotLeader("a")], "b": [ANSWERED]}, 3, 1, None, ["a", "b"], "b"),
    ("unreachable: the next configured address", ["a", "b"],
     {"a": [DOWN], "b": [ANSWERED]}, 3, 1, None, ["a", "b"], "b"),
    ("the cached leader is asked first", ["a", "b", "c"],
     {"b": [ANSWERED]}, 3, 1, "b", ["b"], "b"),
    ("a cached leader that is down: the others in order", ["a", "b", "c"],
     {"b": [DOWN], "a": [DOWN], "c": [ANSWERED]}, 3, 1, "b", ["b", "a", "c"], "c"),
    ("a hint loop stops after hops_max hints, then the next start", ["a", "b", "c"],
     {"a": [NotLeader("b")], "b": [NotLeader("a")], "c": [ANSWERED]}, 2, 1, None,
     ["a", "b", "a", "b", "a", "b", "c"], "c"),
    ("hops_max 0: hints are not followed", ["a", "b"],
     {"a": [NotLeader("z")], "b": [ANSWERED]}, 0, 1, None, ["a", "b"], "b"),
    ("a start reached by a hint is still a start", ["a", "b"],
     {"a": [NotLeader("b")], "b": [NotLeader(None), ANSWERED]}, 3, 1, None,
     ["a", "b", "b"], "b"),
    ("a start found down through a hint is not asked again", ["a", "b", "c"],
     {"a": [NotLeader("b")], "b": [DOWN], "c": [ANSWERED]}, 3, 1, None,
     ["a", "b", "c"], "c"),
    ("a hint to a node found down is not followed", ["a", "b", "c"],
     {"a": [DOWN], "b": [NotLeader("a")], "c": [ANSWERED]}, 3, 1, None,
     ["a", "b", "c"], "c"),
    ("every node down: one pass, then give up", ["a", "b", "c"],
     {"a": [DOWN], "b": [DOWN], "c": [DOWN]}, 3, 1, None, ["a", "b", "c"], None),
    ("an election under way: passes, a pause before each new one", ["a", "b"],
     {"a": [NotLeader(None), NotLeader(None), NotLeader("b")],
      "b": [DOWN, NotLeader(None), ANSWERED]}, 3, 5, None,
     ["a", "b", "~a", "b", "~a", "b"], "b"),
    ("every node down: passes_max passes, then give up", ["a", "b"],
     {"a": [DOWN], "b": [DOWN]}, 3, 3, None, ["a", "b", "~a", "b", "~a", "b"], None),
    ("duplicates in the list are asked once", ["a", "a", "b"],
     {"a": [DOWN], "b": [DOWN]}, 3, 1, None, ["a", "b"], None),
]


@pytest.mark.parametrize(
    "why, configured, answers, hops_max, passes_max, preferred, calls, leader", CASES,
    ids=[case[0] for case in CASES])
def test_the_search_table(why: str, configured: list[str], answers: dict[str, list[Answer]],
                          hops_max: int, passes_max: int, preferred: str | None,
                          calls: list[str], leader: str | None) -> None:
    search = LeaderSearch(configured, hops_max=hops_max, passes_max=passes_max,
                          preferred=preferred)
    assert _run(search, answers) == calls, why
    assert search.leader == leader
    assert search.next_address() is None  # over stays over


@pytest.mark.parametrize("hops_max", [0, 1, 3])
@pytest.mark.parametrize("passes_max", [1, 2, 4])
def test_a_search_is_bounded_whatever_the_nodes_answer(hops_max: int, passes_max: int) -> None:
    """Every node points to the next one, round the ring: no leader is ever found, and the
    calls stay within passes x starts x (hops + 1)."""
    ring = ["a", "b", "c", "d"]
    answers: dict[str, list[Answer]] = {
        address: [NotLeader(ring[(index + 1) % len(ring)])] for index, address in enumerate(ring)}
    search = LeaderSearch(ring, hops_max=hops_max, passes_max=passes_max)
    calls = _run(search, answers)
    assert search.leader is None
    assert len(calls) == passes_max * len(ring) * (hops_max + 1)


def test_a_failed_search_names_every_address_tried() -> None:
    search = LeaderSearch(["a:1", "b:2"], hops_max=3)
    _run(search, {"a:1": [NotLeader("c:3")], "c:3": [DOWN], "b:2": [Unavailable("BUSY")]})
    assert search.addresses_tried() == ("a:1", "c:3", "b:2")
    assert search.describe() == ("a:1: not leader (leader c:3); c:3: connection refused; "
                                 "b:2: BUSY")


def test_a_long_search_shows_its_last_attempts_and_counts_the_rest() -> None:
    search = LeaderSearch([f"n{index}:1" for index in range(10)], hops_max=0)
    _run(search, {f"n{index}:1": [DOWN] for index in range(10)})
    assert search.describe().startswith("2 earlier attempts; n2:1: connection refused")
    assert search.describe().endswith("n9:1: connection refused")


def test_no_address_is_a_config_error_and_an_unanswered_call_a_bug() -> None:
    with pytest.raises(ValueError, match="none configured"):
        LeaderSearch([], hops_max=3)
    search = LeaderSearch(["a"], hops_max=3)
    step = search.next_address()
    assert step is not None and step.address == "a" and not step.pause_first
    with pytest.raises(AssertionError):
        search.next_address()  # the call to a was not answered
    with pytest.raises(AssertionError):
        search.on_answer("b", ANSWERED)  # not the address asked
