"""The controller group's addresses, and which of them to ask next until its leader answers.

Every process that talks to the controllers (the client library, a broker's controller link,
the operator tool) is configured with their client addresses (`controllerAddr`,
`--controller`: `host:port[;host:port...]`, `,` also separates), not with the leader's: only
the leader answers writes and (for the client) routes, and any node may be down or may no
longer lead. Finding the leader is one policy, written here once, without IO (no socket, no
clock): the caller makes each call with its own transport and timeouts, tells `LeaderSearch`
what came back, and asks it where to go next.

    search = LeaderSearch(addresses, hops_max=LEADER_HOPS_MAX)
    while (step := search.next_address()) is not None:     # bounded: see below
        (wait the caller's retry interval first when step.pause_first)
        call step.address -> on_answer(step.address, ANSWERED | NotLeader(hint) | Unavailable(why))
    give up: search.describe() names every address tried and what it answered

Policy (one pass; `passes_max` passes at most):

    start addresses: `preferred` (the leader that answered last) first, then each configured
    address once, in order
    answer from an address          next
    ---------------------------     ----------------------------------------------------------
    ANSWERED                        done (`leader` = that address)
    NotLeader(hint), hint another   the hint, while fewer than hops_max hints were followed
      address                       from this start; else the next start address
    NotLeader(no hint, itself, or   the next start address (an election is under way, or the
      one found unavailable)        node's view is stale: following it would loop or wait twice)
    Unavailable (unreachable,       the next start address; one found unavailable is not
      busy, refused)                started from again in this pass (a second timeout)
    every start address tried       a new pass (`pause_first`: the caller waits first), or,
                                    after passes_max passes, give up (next_address() is None)

Bounds: at most passes_max x start addresses x (hops_max + 1) calls, whatever the controllers
answer, so a broker's link thread or a client call never stalls on a search; a caller that
should wait for an election (the operator tool) asks for several passes and bounds them by
its own deadline too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

__all__ = [
    "ANSWERED",
    "ATTEMPTS_SHOWN_MAX",
    "LEADER_HOPS_MAX",
    "Answer",
    "Answered",
    "LeaderSearch",
    "NextAddress",
    "NotLeader",
    "Unavailable",
    "controller_addresses",
]

LEADER_HOPS_MAX: Final = 3  # NOT_LEADER hints followed from one start address
ATTEMPTS_SHOWN_MAX: Final = 8  # describe() names at most this many attempts (the last ones)


def controller_addresses(text: str | None) -> tuple[str, ...]:
    """`host:port[,host:port...]` (`;` also separates, as RocketMQ's namesrvAddr) -> the
    addresses, blanks dropped. Validating each `host:port` is the caller's config check."""
    return tuple(part.strip() for part in (text or "").replace(";", ",").split(",")
                 if part.strip())


@dataclasses.dataclass(frozen=True, slots=True)
class Answered:
    """The leader answered (or a reply the caller takes as it is): the search is over."""


@dataclasses.dataclass(frozen=True, slots=True)
class NotLeader:
    """The node does not lead; `leader_hint` is the leader's address it knows, if any."""

    leader_hint: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Unavailable:
    """No usable answer: unreachable, timed out, busy, or it refused the caller."""

    reason: str


Answer = Answered | NotLeader | Unavailable
ANSWERED: Final = Answered()


@dataclasses.dataclass(frozen=True, slots=True)
class NextAddress:
    address: str
    pause_first: bool  # a new pass begins: the caller waits its retry interval before calling


class LeaderSearch:
    """One search for the controller leader (see the module docstring for the policy)."""

    def __init__(self, addresses: Sequence[str], *, hops_max: int, passes_max: int = 1,
                 preferred: str | None = None) -> None:
        if not addresses:
            raise ValueError("controller addresses: none configured")
        assert hops_max >= 0 and passes_max >= 1, (hops_max, passes_max)
        self._starts = ([preferred] if preferred else []) + [
            address for address in dict.fromkeys(addresses) if address != preferred]
        self._hops_max = hops_max
        self._passes_max = passes_max
        self._pass = 0
        self._start_index = -1  # the start address of the current chain of hints
        self._hops = 0  # hints followed from that start
        self._unavailable: set[str] = set()  # found unavailable in this pass
        self._pending: str | None = None  # returned by next_address(), not answered yet
        self._hint: str | None = None  # where the last NotLeader pointed (followed next)
        self.leader: str | None = None
        self.attempts: list[tuple[str, str]] = []  # (address, what it answered), in order

    def next_address(self) -> NextAddress | None:
        """Where the next call goes; None: the leader answered, or give up."""
        assert self._pending is None, f"{self._pending} was not answered"
        if self.leader is not None:
            return None
        if self._hint is not None:
            self._pending, self._hint = self._hint, None
            return NextAddress(self._pending, pause_first=False)
        return self._next_start()

    def _next_start(self) -> NextAddress | None:
        pause_first = False
        for _ in range(2):  # the starts left in this pass, then (maybe) a new pass's
            for index in range(self._start_index + 1, len(self._starts)):
                if self._starts[index] not in self._unavailable:
                    self._start_index, self._hops = index, 0
                    self._pending = self._starts[index]
                    return NextAddress(self._pending, pause_first)
            self._pass += 1
            if self._pass >= self._passes_max:
                return None
            self._start_index, self._unavailable, pause_first = -1, set(), True
        raise AssertionError("a new pass has a start address")

    def on_answer(self, address: str, answer: Answer) -> None:
        """What the call to `address` (the last next_address()) came back with."""
        assert address == self._pending, (address, self._pending)
        self._pending = None
        if isinstance(answer, Answered):
            self.leader = address
            self.attempts.append((address, "answered"))
        elif isinstance(answer, NotLeader):
            hint = answer.leader_hint or None
            self.attempts.append((address, f"not leader (leader {hint or 'unknown'})"))
            if (hint is not None and hint != address and hint not in self._unavailable
                    and self._hops < self._hops_max):
                self._hops += 1
                self._hint = hint
        else:
            self.attempts.append((address, answer.reason))
            self._unavailable.add(address)

    def addresses_tried(self) -> tuple[str, ...]:
        """Each address called, once, in the order first called."""
        return tuple(dict.fromkeys(address for address, _ in self.attempts))

    def describe(self) -> str:
        """The attempts, for an error message: `a:1: what; b:2: what` (the last
        ATTEMPTS_SHOWN_MAX, after the count of earlier ones); '' when none was made."""
        shown = self.attempts[-ATTEMPTS_SHOWN_MAX:]
        text = "; ".join(f"{address}: {what}" for address, what in shown)
        earlier = len(self.attempts) - len(shown)
        return f"{earlier} earlier attempts; {text}" if earlier else text
