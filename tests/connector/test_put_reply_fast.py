"""PutReply's fast paths (a single-queue reply formatted by hand, read by one regular
expression) give exactly what the general paths (json.dumps, json.loads + field checks) give.

Goal: the fast paths exist only to save a single send's JSON work; they must never encode other
bytes nor decode other values, nor accept what the general decoder refuses. Method: hypothesis
replies of every shape (one queue or several, odd statuses and errors, integers at and past the
64-bit limits, bools where ints go) encoded both ways; their encodings, with the broker's
"replication" field and mutated byte by byte (flips, cuts, insertions, leading zeros, signs),
decoded both ways: the same PutReply, or ProtocolError from both.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from connector.protocol import ProtocolError, PutReply

EXAMPLES = 400

_ints = st.one_of(st.integers(min_value=-(2**63) - 2, max_value=2**63 + 2),
                  st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63) + 1, 10**17, 10**18]),
                  st.booleans())
_statuses = st.one_of(st.sampled_from(["PUT_OK", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE",
                                       "MESSAGE_ILLEGAL", ""]), st.text(max_size=8))
_queues = st.one_of(st.lists(st.lists(_ints, min_size=3, max_size=3), max_size=3),
                    st.lists(st.lists(_ints, max_size=4), max_size=2))
_replies = st.builds(PutReply, _statuses, _ints, _queues,
                     st.one_of(st.none(), st.lists(_ints, max_size=3)), _ints,
                     st.one_of(st.just(""), st.text(max_size=6)), st.booleans())


def _general_encode(reply: PutReply) -> bytes:
    return json.dumps({
        "status": reply.status, "code": reply.code, "queues": reply.queues,
        "row_queue_ids": reply.row_queue_ids, "log_position_end": reply.log_position_end,
        "error": reply.error, "duplicate": reply.duplicate}).encode()


def _decoded(decode: Any, raw: bytes) -> PutReply | str:
    try:
        return decode(raw)  # type: ignore[no-any-return]
    except ProtocolError:
        return "ProtocolError"


def _mutations(raw: bytes, data: st.DataObject) -> list[bytes]:
    out = [raw, raw[:-1] + b', "replication": "SYNC_MASTER"}']
    for _ in range(6):
        at = data.draw(st.integers(min_value=0, max_value=len(raw)))
        piece = data.draw(st.sampled_from([b"0", b"-", b"9", b" ", b'"', b"\\", b",", b"1e3",
                                           b"]", b"[", b"\xff", b"", b"-0", b"00"]))
        cut = data.draw(st.integers(min_value=0, max_value=2))
        out.append(raw[:at] + piece + raw[at + cut:])
    return out


@settings(max_examples=EXAMPLES, deadline=None)
@given(_replies)
def test_encode_matches_json_dumps(reply: PutReply) -> None:
    assert reply.encode() == _general_encode(reply)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_replies, st.data())
def test_decode_matches_the_general_decoder(reply: PutReply, data: st.DataObject) -> None:
    for raw in _mutations(_general_encode(reply), data):
        assert _decoded(PutReply.decode, raw) == _decoded(PutReply.decode_json, raw), raw


def test_an_acknowledged_single_send_takes_the_fast_paths() -> None:
    reply = PutReply("PUT_OK", 0, [[3, 41, 1]], None, 4096)
    raw = reply.encode()[:-1] + b', "replication": "SYNC_MASTER"}'
    assert raw == (b'{"status": "PUT_OK", "code": 0, "queues": [[3, 41, 1]], "row_queue_ids": '
                   b'null, "log_position_end": 4096, "error": "", "duplicate": false, '
                   b'"replication": "SYNC_MASTER"}')
    assert PutReply.decode(raw) == reply == PutReply.decode_json(raw)
    for bad in (raw.replace(b"41", b"041"), raw.replace(b"4096", b"9" * 19)):
        assert _decoded(PutReply.decode, bad) == "ProtocolError"
