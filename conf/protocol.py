"""Protocol versions: what a peer says it speaks, and the one rule for what may run together.

Every link between our processes carries the sender's version once, as text
`"<major>.<minor> <release>"` (`"0.2 0.2.0.dev0"`): the protocol version, which changes only
when a frame or message changes, and the installed release (conf/version.py), for the operator.

    link                          where the text travels                  who checks
    HA master <-> slave           trailing block of SlaveHello/MasterHello  both ends
    broker  -> controller         `protocol` of register/heartbeat          the controller
    controller -> broker          `protocol` of their replies               the broker
    controller <-> controller     `"p"` of every Raft message               the receiver
    client  -> broker/controller  header `rocketha-protocol` of each call   the server

Absence of the text means 0.1: the v0.1.0 release sends none. The rule (`refusal`): the same
major, and minors at most MINOR_SKEW_MAX apart, run together; anything else is refused with one
line naming both versions and DOCS_PAGE, and the link is closed. A text that does not parse is
refused the same way: a version is never guessed.

Tests fake this process's protocol version with the environment variable TEST_PROTOCOL_ENV
(read once at import); nothing else sets it.
"""

from __future__ import annotations

import dataclasses
import os
import re

from conf.version import VERSION

__all__ = [
    "DOCS_PAGE",
    "LEGACY",
    "LOCAL",
    "MINOR_SKEW_MAX",
    "PROTOCOL",
    "PROTOCOL_HEADER",
    "RELEASE_BYTES_MAX",
    "TEST_PROTOCOL_ENV",
    "VERSION_HEADER",
    "BadVersionText",
    "PeerVersion",
    "parse_peer_version",
    "refusal",
]

PROTOCOL = (0, 2)  # bump the minor when a frame or message changes in a way a peer sees
MINOR_SKEW_MAX = 1
DOCS_PAGE = "docs/planned-operations.md#compatibility"
TEST_PROTOCOL_ENV = "ROCKETHA_TEST_PROTOCOL"
PROTOCOL_HEADER = "rocketha-protocol"  # of every Flight call a client of ours makes
RELEASE_BYTES_MAX = 64
_TEXT = re.compile(r"(\d{1,3})\.(\d{1,3})(?: ([\x21-\x7e]{1,64}))?")


@dataclasses.dataclass(frozen=True, slots=True)
class PeerVersion:
    major: int
    minor: int
    release: str = ""  # "" when the peer did not say (v0.1.0)

    @property
    def protocol(self) -> str:
        return f"{self.major}.{self.minor}"

    def text(self) -> str:
        """The wire form: "<major>.<minor> <release>"."""
        return f"{self.protocol} {self.release}" if self.release else self.protocol

    def describe(self) -> str:
        """For the refusal line: "protocol 0.2 (release 0.2.0)"."""
        return f"protocol {self.protocol} (release {self.release or 'not said'})"


LEGACY = PeerVersion(0, 1, "0.1.x")  # what a peer that sends no version speaks


class BadVersionText(ValueError):
    """A version text that does not parse; str() is the refusal line's half."""


def parse_peer_version(text: str | None) -> PeerVersion:
    """The version a peer sent; None or "" (not sent) is LEGACY. Raises BadVersionText."""
    if not text:
        return LEGACY
    match = _TEXT.fullmatch(text)
    if match is None:
        raise BadVersionText(f"unreadable version {text[:80]!r}")
    return PeerVersion(int(match[1]), int(match[2]), match[3] or "")


def refusal(local: PeerVersion, peer_text: str | None, link: str) -> str | None:
    """None when this process (`local`) and a peer that sent `peer_text` may run together;
    else the one line that refuses the link (`link` names it: "HA link from slave 1")."""
    try:
        peer = parse_peer_version(peer_text)
    except BadVersionText as err:
        return (f"{link} refused: the peer sent an {err}, this process speaks "
                f"{local.describe()}; see {DOCS_PAGE}")
    if peer.major == local.major and abs(peer.minor - local.minor) <= MINOR_SKEW_MAX:
        return None
    return (f"{link} refused: the peer speaks {peer.describe()}, this process "
            f"{local.describe()}; they cannot run together (same major, minors at most "
            f"{MINOR_SKEW_MAX} apart; see {DOCS_PAGE})")


def _local(environ: dict[str, str] | os._Environ[str]) -> PeerVersion:
    faked = environ.get(TEST_PROTOCOL_ENV, "")
    if faked:
        version = parse_peer_version(faked)
        return PeerVersion(version.major, version.minor, f"{VERSION}+test")
    return PeerVersion(*PROTOCOL, VERSION[:RELEASE_BYTES_MAX].replace(" ", "_"))


LOCAL = _local(os.environ)
# the header every Flight call of ours carries (clients, brokers, controllers, tools)
VERSION_HEADER = (PROTOCOL_HEADER.encode(), LOCAL.text().encode())
