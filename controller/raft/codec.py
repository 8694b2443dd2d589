"""Wire codec of Raft messages: one UTF-8 JSON object per message (never pickle).

Layout: `{"v": 1, "p": "<protocol>", "type": "<kind>", <field>: <value>, ...}` with the
kinds and fields of `controller.raft.messages`; "p" is the sender's protocol version text
(conf/protocol.py, since 0.2; absent from v0.1.0, whose decoder ignores it: absent means 0.1),
and a message whose version the rule refuses is a CodecError carrying the rule's line. Byte
strings (entry data, snapshot data) travel as base64 text; entries as
`[entry_index, term, kind, data_b64]`; a snapshot as `{"entry_index", "term", "voter_ids",
"data"}`. The framing (length prefix, CRC, maximum frame
size checked before allocation) belongs to the transport; this module checks shapes and types
and raises `CodecError` for anything else, so a bad peer cannot crash a node.

What a decoded message must also satisfy (checked here, whatever the receiver's state; the
core checks what depends on its own log, see `RaftNode.step`):
- every number is below 2**63 (`VALUE_MAX`): the hard state stores terms and indexes as u64,
  and a term of 2**64 once ended a controller in `struct.error`;
- node ids are > 0 and a message is not addressed to its sender;
- an AppendRequest's entries chain: entry i has index `prev_index + 1 + i`, terms never go
  down, none is below `prev_term` nor above the message's term (an unchained list once made the
  receiver's apply loop spin forever);
- a snapshot's term is not above the message's term, its voter ids are distinct and > 0;
- a vote request's last_term is not above its term.
JSON that is too deep (RecursionError) or has a number too long for Python (ValueError) is a
CodecError like any other undecodable payload.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from conf.protocol import LOCAL, refusal
from controller.errors import CodecError
from controller.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    Snapshot,
    SnapshotRequest,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

__all__ = ["CODEC_VERSION", "VALUE_MAX", "decode_message", "encode_message"]

CODEC_VERSION = 1
VALUE_MAX = 2**63 - 1  # terms, indexes, ids and sequence numbers from a peer
VOTERS_MAX = 5  # CLUSTER_SIZES' largest

_KINDS: dict[str, type[Any]] = {
    "vote": VoteRequest,
    "vote_resp": VoteResponse,
    "append": AppendRequest,
    "append_resp": AppendResponse,
    "heartbeat": HeartbeatRequest,
    "heartbeat_resp": HeartbeatResponse,
    "snapshot": SnapshotRequest,
    "timeout_now": TimeoutNow,
}
_OPTIONAL = frozenset({"transfer"})  # fields added later, with a default (messages.py)
_NAMES = {cls: name for name, cls in _KINDS.items()}
_FIELDS: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(cls.__dataclass_fields__) for cls in _KINDS.values()
}


def encode_message(message: Message) -> bytes:
    """The JSON bytes of `message`."""
    kind = type(message)
    body: dict[str, Any] = {"v": CODEC_VERSION, "p": LOCAL.text(), "type": _NAMES[kind]}
    for name in _FIELDS[kind]:
        value = getattr(message, name)
        if name == "entries":
            value = [_entry_to_json(entry) for entry in value]
        elif name == "snapshot":
            value = _snapshot_to_json(value)
        body[name] = value
    return json.dumps(body, separators=(",", ":")).encode()


def decode_message(data: bytes) -> Message:
    """Parse bytes from a peer. Raises CodecError naming what is wrong."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError
        raise CodecError("raft message", f"not JSON ({str(err)[:200]})") from err
    if not isinstance(body, dict):
        raise CodecError("raft message", "not a JSON object")
    if body.get("v") != CODEC_VERSION:
        raise CodecError("raft message", f"unsupported version {body.get('v')!r}")
    protocol = body.get("p")
    refused = refusal(LOCAL, protocol if protocol is None or isinstance(protocol, str)
                      else repr(protocol)[:40],
                      f"Raft message from node {str(body.get('from_id'))[:20]}")
    if refused is not None:
        raise CodecError("raft message", refused)
    name = body.get("type")
    kind = _KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise CodecError("raft message", f"unknown type {str(name)[:40]!r}")
    values: dict[str, Any] = {}
    for name in _FIELDS[kind]:
        if name in _OPTIONAL and name not in body:
            continue  # a field newer than the sender: its default
        if name not in body:
            raise CodecError("raft message", f"{body['type']} lacks field {name!r}")
        values[name] = _field(name, body[name])
    message: Message = kind(**values)
    reason = _impossible(message)
    if reason is not None:
        raise CodecError("raft message", f"{body['type']} from {message.from_id}: {reason}")
    return message


def _impossible(message: Message) -> str | None:
    """Why `message` cannot come from a correct peer whatever the receiver holds, or None."""
    if message.from_id == 0 or message.to_id == 0 or message.from_id == message.to_id:
        return f"node ids {message.from_id} -> {message.to_id}"
    if isinstance(message, AppendRequest):
        if message.prev_term > message.term:
            return f"prev_term {message.prev_term} above term {message.term}"
        previous_term = message.prev_term
        for position, entry in enumerate(message.entries):
            if entry.entry_index != message.prev_index + 1 + position:
                return (f"entry {position} has index {entry.entry_index}, expected "
                        f"{message.prev_index + 1 + position}: entries do not chain")
            if not previous_term <= entry.term <= message.term:
                return (f"entry {entry.entry_index} has term {entry.term}, outside "
                        f"[{previous_term}, {message.term}]")
            previous_term = entry.term
    elif isinstance(message, SnapshotRequest):
        snapshot = message.snapshot
        if snapshot.term > message.term:
            return f"snapshot term {snapshot.term} above term {message.term}"
        voters = snapshot.voter_ids
        if not voters or len(set(voters)) != len(voters) or min(voters) == 0:
            return f"snapshot voter ids {voters!r}"
    elif isinstance(message, VoteRequest) and message.last_term > message.term:
        return f"last_term {message.last_term} above term {message.term}"
    return None


def _field(name: str, value: Any) -> Any:
    if name == "entries":
        if not isinstance(value, list):
            raise CodecError("raft message", "entries is not a list")
        return tuple(_entry_from_json(item) for item in value)
    if name == "snapshot":
        return _snapshot_from_json(value)
    if name in ("pre_vote", "granted", "success", "transfer"):
        if not isinstance(value, bool):
            raise CodecError("raft message", f"{name} is not a boolean")
        return value
    return _int(name, value)


def _int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= VALUE_MAX:
        raise CodecError("raft message", f"{name} is not an integer in [0, 2**63): "
                         f"{str(value)[:40]}")
    return value


def _bytes(name: str, value: Any) -> bytes:
    if not isinstance(value, str):
        raise CodecError("raft message", f"{name} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise CodecError("raft message", f"{name} is not valid base64") from err


def _entry_to_json(entry: Entry) -> list[Any]:
    return [entry.entry_index, entry.term, int(entry.kind), base64.b64encode(entry.data).decode()]


def _entry_from_json(item: Any) -> Entry:
    if not isinstance(item, list) or len(item) != 4:
        raise CodecError("raft message", f"entry is not [index, term, kind, data]: {item!r}")
    kind = _int("entry kind", item[2])
    if kind not in tuple(EntryKind):
        raise CodecError("raft message", f"unknown entry kind {kind}")
    return Entry(
        _int("entry_index", item[0]), _int("term", item[1]), EntryKind(kind),
        _bytes("entry data", item[3]),
    )


def _snapshot_to_json(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "entry_index": snapshot.entry_index,
        "term": snapshot.term,
        "voter_ids": list(snapshot.voter_ids),
        "data": base64.b64encode(snapshot.data).decode(),
    }


def _snapshot_from_json(value: Any) -> Snapshot:
    if not isinstance(value, dict):
        raise CodecError("raft message", "snapshot is not an object")
    voters = value.get("voter_ids")
    if not isinstance(voters, list) or len(voters) > VOTERS_MAX:
        raise CodecError("raft message", "snapshot voter_ids is not a list")
    return Snapshot(
        entry_index=_int("snapshot entry_index", value.get("entry_index")),
        term=_int("snapshot term", value.get("term")),
        voter_ids=tuple(_int("voter id", voter) for voter in voters),
        data=_bytes("snapshot data", value.get("data")),
    )
