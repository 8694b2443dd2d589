"""Receipt handles: opaque to clients, checked by the proxy.

    handle = "rh1." base64url(payload) "." hex(HMAC-SHA256(key, group \\0 topic \\0 payload))[:32]
    payload = "<broker_name>|<queue_id>|<queue_offset>|<nonce>|<invisible_until_ms>"

The payload is enough to find the message and its lease (replica set, queue, queue offset); the
nonce names one delivery (a redelivery or ChangeInvisibleDuration makes a new one, so an older
handle is stale); the MAC binds it to the consumer group and topic, so a handle cannot be
forged, edited or replayed against another group. `decode` returns None for anything that is
not a well-formed handle with a valid MAC (the caller answers INVALID_RECEIPT_HANDLE); whether
the lease it names is still current is the POP state's question (pop_core.py).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac

__all__ = ["HANDLE_CHARS_MAX", "ReceiptHandle", "ReceiptHandleCodec"]

HANDLE_CHARS_MAX = 512
_PREFIX = "rh1."
_MAC_HEX_CHARS = 32


@dataclasses.dataclass(frozen=True, slots=True)
class ReceiptHandle:
    broker_name: str
    queue_id: int
    queue_offset: int
    nonce: int
    invisible_until_ms: int


class ReceiptHandleCodec:
    def __init__(self, key: bytes) -> None:
        assert len(key) >= 16, "a receipt handle key of at least 16 bytes"
        self._key = key

    def encode(self, group: str, topic: str, handle: ReceiptHandle) -> str:
        payload = (f"{handle.broker_name}|{handle.queue_id}|{handle.queue_offset}|"
                   f"{handle.nonce}|{handle.invisible_until_ms}").encode()
        text = base64.urlsafe_b64encode(payload).decode().rstrip("=")
        return f"{_PREFIX}{text}.{self._mac(group, topic, payload)}"

    def decode(self, group: str, topic: str, text: str) -> ReceiptHandle | None:
        if not isinstance(text, str) or len(text) > HANDLE_CHARS_MAX or \
                not text.startswith(_PREFIX):
            return None
        body, _, mac = text[len(_PREFIX):].rpartition(".")
        try:
            payload = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(mac, self._mac(group, topic, payload)):
            return None
        parts = payload.decode(errors="replace").split("|")
        if len(parts) != 5 or not all(part.isdigit() for part in parts[1:]):
            return None
        return ReceiptHandle(parts[0], int(parts[1]), int(parts[2]), int(parts[3]),
                             int(parts[4]))

    def _mac(self, group: str, topic: str, payload: bytes) -> str:
        message = group.encode() + b"\0" + topic.encode() + b"\0" + payload
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()[:_MAC_HEX_CHARS]
