"""Raft messages between controllers over TCP: framing, bounded send queues, reconnects.

Frame (big-endian, 12-byte header):

    magic u16 0x5246 ('RF') | version u8 (1) | kind u8 (1 = Raft message) | length u32
    | crc32 u32 over the payload | payload (the JSON of `controller.raft.encode_message`)

The receiver checks magic, version and kind, refuses `length > frame_bytes_max` *before*
reading (no allocation on a peer's word), checks the CRC, decodes the message, and closes the
connection on any error (the peer reconnects; Raft tolerates the lost messages). Nothing read
from a socket is ever unpickled.

Limits on the listener, so that strangers on the Raft port cannot use up the process (a
controller once grew from 79 to 244 MB holding idle connections): at most `connections_max`
inbound connections at once (raftConnectionsMax; one more is closed at accept, logged once per
burst); a connection on which no frame starts within `idle_timeout_ms` is closed
(raftIdleTimeoutMs: a real peer reconnects when it has something to say); a frame that has
started must be complete within `frame_timeout_ms` (raftFrameTimeoutMs: a half-sent frame,
one byte at a time, does not hold its buffer for ever). Memory held by inbound connections is
thus at most connections_max x frame_bytes_max, for at most frame_timeout_ms at a time.

TLS (tls.server.mode=enforcing): both directions are mutual TLS. The listener requires a
certificate naming a controller of the peer list other than this one
(`rocketha://controller/<id>`), and every message on that connection must come from that id
(`from_id`); a sender checks that the server it dialled names the peer it meant. Anyone else
is refused at the handshake or at the first frame, logged once per peer address and identity
(`refusals`); the node keeps running. The handshake must finish within raftFrameTimeoutMs.

Sending: one asyncio.Queue per peer, bounded by `send_queue_max`; when it is full, the new
message is dropped (counted), as a lossy network would. Each peer has one sender task that
(re)connects with a capped backoff and writes frames in order; while the peer is unreachable
its queue is emptied (those messages would be stale when it comes back: Raft resends).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import zlib
from collections.abc import Callable

from conf.tls import PeerRefusals, TLSSettings, identity_of_peercert, parse_identity
from conf.tls_reload import ReloadingTLS, watch
from controller.errors import CodecError
from controller.raft import Message, decode_message, encode_message

__all__ = ["FRAME_HEADER", "FrameError", "RaftTransport", "encode_frame", "read_frame"]

logger = logging.getLogger(__name__)

FRAME_HEADER = struct.Struct(">HBBII")
FRAME_MAGIC = 0x5246
FRAME_VERSION = 1
KIND_RAFT = 1
CONNECT_TIMEOUT_S = 1.0
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 1.0


class FrameError(CodecError):
    """A frame that breaks the format (bad magic, version, size or checksum), or is cut short."""


class _RefusedPeer(Exception):
    """A TLS peer whose certificate is valid but names someone else than it must."""

    def __init__(self, identity: str, reason: str) -> None:
        super().__init__(reason)
        self.identity = identity


class IdleTimeoutError(Exception):
    """No frame started on an inbound connection within raftIdleTimeoutMs."""


def encode_frame(payload: bytes, kind: int = KIND_RAFT) -> bytes:
    return FRAME_HEADER.pack(FRAME_MAGIC, FRAME_VERSION, kind, len(payload),
                             zlib.crc32(payload)) + payload


async def read_frame(reader: asyncio.StreamReader, frame_bytes_max: int,
                     frame_timeout_s: float | None = None,
                     idle_timeout_s: float | None = None) -> bytes:
    """The payload of the next frame. Raises FrameError, or IncompleteReadError at EOF.

    `idle_timeout_s`: the first byte must come within this (else IdleTimeoutError);
    `frame_timeout_s`: once it is in, the whole frame must be within this (else FrameError)."""
    try:
        async with asyncio.timeout(idle_timeout_s):
            first = await reader.readexactly(1)
    except TimeoutError as err:
        raise IdleTimeoutError(f"no frame within {idle_timeout_s} s (raftIdleTimeoutMs)") from err
    try:
        async with asyncio.timeout(frame_timeout_s):
            return await _read_rest(reader, first, frame_bytes_max)
    except TimeoutError as err:
        raise FrameError("frame", f"not complete within {frame_timeout_s} s "
                         "(raftFrameTimeoutMs)") from err


async def _read_rest(reader: asyncio.StreamReader, first: bytes, frame_bytes_max: int) -> bytes:
    header = first + await reader.readexactly(FRAME_HEADER.size - 1)
    magic, version, kind, length, crc = FRAME_HEADER.unpack(header)
    if magic != FRAME_MAGIC or version != FRAME_VERSION or kind != KIND_RAFT:
        raise FrameError("frame", f"bad header magic={magic:#x} version={version} kind={kind}")
    if length > frame_bytes_max:
        raise FrameError("frame", f"{length} bytes exceeds raftFrameBytesMax {frame_bytes_max}")
    payload = await reader.readexactly(length)
    if zlib.crc32(payload) != crc:
        raise FrameError("frame", "checksum mismatch")
    return payload


class RaftTransport:
    def __init__(
        self,
        node_id: int,
        peers: dict[int, tuple[str, int]],
        on_message: Callable[[Message], None],
        *,
        frame_bytes_max: int,
        send_queue_max: int,
        connections_max: int = 16,
        idle_timeout_ms: int = 60_000,
        frame_timeout_ms: int = 5000,
        tls: TLSSettings | None = None,
    ) -> None:
        self.node_id = node_id
        self._peers = {peer: address for peer, address in peers.items() if peer != node_id}
        self._listen = peers[node_id]
        self._on_message = on_message
        self._frame_bytes_max = frame_bytes_max
        self._queues: dict[int, asyncio.Queue[bytes]] = {
            peer: asyncio.Queue(maxsize=send_queue_max) for peer in self._peers
        }
        self._connections_max = connections_max
        self._idle_timeout_s = idle_timeout_ms / 1000
        self._frame_timeout_s = frame_timeout_ms / 1000
        self.dropped = 0
        self.bad_frames = 0
        self.refused_connections = 0  # over connections_max
        self.idle_closed = 0
        self._server: asyncio.Server | None = None
        self._inbound: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        # a context per connection, from files checked every tls.reloadIntervalMs
        self.tls = (watch(ReloadingTLS(tls, what=f"Raft node {node_id}"))
                    if tls is not None and tls.enabled else None)
        self.refusals = PeerRefusals(logger, f"Raft node {node_id}")

    async def start(self, tasks: asyncio.TaskGroup) -> None:
        host, port = self._listen
        # TLS starts inside _serve_connection (start_tls), so a failed handshake is a refusal
        # this node logs and counts, and handshakes count against raftConnectionsMax
        self._server = await asyncio.start_server(self._serve_connection, host, port)
        for peer in self._peers:
            tasks.create_task(self._sender(peer), name=f"raft-send-{peer}")

    async def close(self) -> None:
        """Stop listening and end every inbound connection (their handlers see EOF)."""
        if self._server is not None:
            self._server.close()
        for writer in self._inbound.values():
            writer.close()
        if self._inbound:
            await asyncio.wait(list(self._inbound), timeout=CONNECT_TIMEOUT_S)
        if self._server is not None:
            await self._server.wait_closed()

    def send(self, message: Message) -> None:
        queue = self._queues.get(message.to_id)
        if queue is None:
            return
        frame = encode_frame(encode_message(message))
        if len(frame) - FRAME_HEADER.size > self._frame_bytes_max:
            # The peer would refuse it (a snapshot outgrew the limit): say so, loudly.
            logger.error("node %d cannot send a %d-byte %s to %d: raftFrameBytesMax is %d",
                         self.node_id, len(frame), type(message).__name__, message.to_id,
                         self._frame_bytes_max)
            self.dropped += 1
            return
        try:
            queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.dropped += 1

    async def _sender(self, peer: int) -> None:
        host, port = self._peers[peer]
        queue = self._queues[peer]
        backoff_s = BACKOFF_MIN_S
        while True:  # one sender per peer for the life of the node
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    client_tls = self.tls.client() if self.tls is not None else None
                    _, writer = await asyncio.open_connection(
                        host, port, ssl=client_tls,
                        server_hostname=host if client_tls else None)
                if client_tls is not None:
                    self._check_server(peer, writer)
            except ssl.SSLError as err:
                self.refusals.refuse(f"{host}:{port}", "", f"TLS handshake failed: {err}")
                self._discard(queue)
                await asyncio.sleep(BACKOFF_MAX_S)
                continue
            except _RefusedPeer as err:
                self.refusals.refuse(f"{host}:{port}", err.identity, str(err))
                writer.close()
                self._discard(queue)
                await asyncio.sleep(BACKOFF_MAX_S)
                continue
            except (OSError, TimeoutError):
                self._discard(queue)  # stale by the time the peer is back; Raft resends
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, BACKOFF_MAX_S)
                continue
            backoff_s = BACKOFF_MIN_S
            try:
                while True:  # until the connection breaks
                    frame = await queue.get()
                    writer.write(frame)
                    while not queue.empty():
                        writer.write(queue.get_nowait())
                    await writer.drain()
            except (OSError, ConnectionError) as err:
                logger.debug("link %d->%d broke: %s", self.node_id, peer, err)
            finally:
                writer.close()

    def _check_server(self, peer: int, writer: asyncio.StreamWriter) -> None:
        identity = identity_of_peercert(writer.get_extra_info("peercert"))
        member = parse_identity(identity)
        if member is None or member.kind != "controller" or int(member.name) != peer:
            raise _RefusedPeer(identity, f"dialled controller {peer}, the certificate says "
                               "otherwise")

    def _peer_of(self, writer: asyncio.StreamWriter) -> int:
        """The controller id an inbound TLS connection's certificate names (a peer of ours,
        not us); raises _RefusedPeer otherwise."""
        identity = identity_of_peercert(writer.get_extra_info("peercert"))
        member = parse_identity(identity)
        if member is None or member.kind != "controller":
            raise _RefusedPeer(identity, "not a controller certificate")
        if int(member.name) not in self._peers:
            raise _RefusedPeer(identity, f"controller {member.name} is not a peer of node "
                               f"{self.node_id} ({sorted(self._peers)})")
        return int(member.name)

    async def _start_tls(self, writer: asyncio.StreamWriter) -> None:
        assert self.tls is not None
        try:
            await writer.start_tls(self.tls.server(),
                                   ssl_handshake_timeout=self._frame_timeout_s)
        except (ssl.SSLError, OSError, TimeoutError) as err:
            raise _RefusedPeer("", f"TLS handshake failed: {err}") from err

    def _discard(self, queue: asyncio.Queue[bytes]) -> None:
        while not queue.empty():
            queue.get_nowait()
            self.dropped += 1

    async def _serve_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        if len(self._inbound) >= self._connections_max:
            self.refused_connections += 1
            if self.refused_connections & (self.refused_connections - 1) == 0:  # 1, 2, 4, ...
                logger.warning("node %d refuses a Raft connection from %s: %d open "
                               "(raftConnectionsMax; %d refused so far)", self.node_id,
                               writer.get_extra_info("peername"), len(self._inbound),
                               self.refused_connections)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._inbound[task] = writer
        host = str((writer.get_extra_info("peername") or ("?",))[0])
        try:
            if self.tls is not None:
                await self._start_tls(writer)
            peer = self._peer_of(writer) if self.tls is not None else None
            while True:  # until EOF, silence or a bad frame
                payload = await read_frame(reader, self._frame_bytes_max,
                                           self._frame_timeout_s, self._idle_timeout_s)
                message = decode_message(payload)
                if message.to_id != self.node_id:
                    raise FrameError("raft message", f"addressed to {message.to_id}")
                if peer is not None and message.from_id != peer:
                    raise _RefusedPeer(f"controller {peer}", f"controller {peer} sent a "
                                       f"message from {message.from_id}")
                self._on_message(message)
        except _RefusedPeer as err:
            self.refusals.refuse(host, err.identity, str(err))
        except (asyncio.IncompleteReadError, OSError):
            pass
        except IdleTimeoutError as err:
            self.idle_closed += 1
            logger.info("node %d closes a Raft connection from %s: %s", self.node_id,
                        writer.get_extra_info("peername"), err)
        except CodecError as err:
            self.bad_frames += 1
            if self.bad_frames & (self.bad_frames - 1) == 0:  # 1, 2, 4, ...: no log flood
                logger.warning("node %d closes a Raft connection from %s: %s (%d bad frames "
                               "so far)", self.node_id, writer.get_extra_info("peername"), err,
                               self.bad_frames)
        finally:
            del self._inbound[task]
            writer.close()

