"""One sequence of put round trips for the Producer: its retries, and (idempotent, with a
controller) the master watch that gives up on a put whose master was replaced. Its DoPut
streams come from the Producer's StreamPool (connector/client/stream_pool.py), shared by all
its channels, rotated before gRPC's deadline cuts them.

An idempotent batch is retried only in the replica set it was first sent to: the idempotence
table that recognises a retry is per set (`_PutChannel._pinned`).
"""

from __future__ import annotations

import time

import pyarrow as pa
from pyarrow import flight

from conf.signing import descriptor_target
from connector.client.broker_calls import _Base, _Routes
from connector.client.config import ClientConfig
from connector.client.connections import _connection, as_rocketha_error
from connector.client.discovery import _alive_masters, _masters_of, controller_cluster_list
from connector.client.master_watch import RoundTrips, replacement_of
from connector.client.producer_core import STORED_NOT_ACKED
from connector.client.stream_pool import (
    PER_BATCH,
    StreamPool,
    _Stream,
    close_quietly,
    refuses_per_batch,
)
from connector.protocol import (
    FatalError,
    PutReply,
    RetriableError,
    RocketHAError,
    error_for_code,
    produce_descriptor_command,
    status_for,
)

__all__: list[str] = []


class _StoredNotAcked(RetriableError):
    """An idempotent producer's batch answered with a STORED_NOT_ACKED status."""

    def __init__(self, reply: PutReply) -> None:
        super().__init__(status_for(reply.status), reply.error or reply.status)
        self.reply = reply


class _PutChannel(_Base):
    """One sequence of put round trips and (idempotent with a controller) its master watch;
    its routes and its streams are the Producer's, shared with its other channels. One thread
    at a time: the Producer's synchronous `put`, or one lane of its asynchronous sends."""

    def __init__(self, config: ClientConfig, *, idempotent: bool,
                 routes: _Routes | None = None, broker_name: str | None = None,
                 streams: StreamPool | None = None) -> None:
        super().__init__(config, routes)
        self.idempotent = idempotent
        self._own_streams = streams is None  # (a channel alone closes its pool with itself)
        self._streams = StreamPool() if streams is None else streams
        # The shelf of the last key used, checked first (schema equality, ~0.7 us): hashing a
        # pa.Schema to look the key up costs ~6 us, on every single send
        self._last_shelf: tuple[str, str, pa.Schema, list[_Stream]] | None = None
        self._round_trips = (RoundTrips(config.master_check_after_ms / 1000.0,
                                        config.master_check_interval_ms / 1000.0)
                             if idempotent and config.controller else None)
        # An idempotent batch is retried only in the replica set it was first sent to (its
        # idempotence table is per set); a lane of asynchronous sends (one queue, one
        # producer id) stays in the set of its first send. A lane of one replica set
        # (`broker_name`, a producer with a controller writing to every set of a topic) is
        # in that set from its first send on.
        self._lane_home: list[str] = [] if broker_name is None else [broker_name]
        self.answered_by = ""  # the endpoint of the last reply (`attempt`)

    def put(self, topic: str, batch: pa.RecordBatch) -> PutReply:
        """One batch with the retry policy (see Producer.put)."""
        home: list[str] = []  # the replica set of the first attempt (idempotent batches)

        def call(endpoint: str) -> PutReply:
            reply = self._round_trip(topic, batch, self._pinned(endpoint, home))
            if not status_for(reply.status).stored and status_for(reply.status).retriable:
                raise error_for_code(reply.code, reply.error or reply.status)
            if self.idempotent and reply.status in STORED_NOT_ACKED:
                raise _StoredNotAcked(reply)
            return reply

        try:
            reply: PutReply = self._retry(call, f"send to {topic}")
        except _StoredNotAcked as err:  # the deadline passed: the last answer stands
            reply = err.reply
        except pa.ArrowException as err:
            raise FatalError(status_for("BAD_SCHEMA"), str(err)) from err
        return reply

    def _controller_endpoints(self, controller: str) -> tuple[str, ...]:
        cluster = controller_cluster_list(controller, self.config.request_timeout_ms,
                                          self.config.tls, self.config.credentials)
        self._routes.set_of_member = {
            str(member["broker_address"]): str(status["replica"]["broker_name"])
            for status in cluster.get("replica_sets", [])
            for member in status["replica"].get("brokers", [])}
        self._routes.master_of_set = dict(_alive_masters(cluster))
        self._routes.incomplete = (len(self._routes.master_of_set)
                                   < len(cluster.get("replica_sets", [])))
        return _masters_of(cluster, controller)

    def _pinned(self, endpoint: str, home: list[str]) -> str:
        """Where an idempotent batch goes: on its first attempt `endpoint` (and its replica
        set becomes `home`); on a retry, the current master of `home`, never another set's
        (the idempotence table that recognises a retry is per replica set: a retry stored by
        another set would be stored twice)."""
        if self.config.controller is None or not (self.idempotent or home):
            return endpoint
        if not home:
            name = self._routes.set_of_member.get(endpoint)
            if name is not None:
                home.append(name)
            return endpoint
        master = self._routes.master_of_set.get(home[0])
        if master is None:
            self._routes.stale = True
            raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                                 f"replica set {home[0]} has no alive master yet")
        return master

    def attempt(self, topic: str, batch: pa.RecordBatch) -> PutReply | RocketHAError:
        """One round trip, no retry (ProducerCore decides): the reply, or the error."""
        endpoint = ""
        try:
            endpoint = self._pinned(self.endpoint, self._lane_home)
            reply = self._round_trip(topic, batch, endpoint)
        except flight.FlightError as err:
            error = as_rocketha_error(err)
            if isinstance(err, flight.FlightUnavailableError) or error.refresh_route:
                self._refresh_route(endpoint)
            return error
        except RocketHAError as err:
            return err
        except pa.ArrowException as err:
            return FatalError(status_for("BAD_SCHEMA"), str(err))
        except OSError as err:
            return RetriableError(status_for("SERVICE_NOT_AVAILABLE"), f"{endpoint}: {err}")
        self.answered_by = endpoint
        status = status_for(reply.status)
        if not status.stored and status.refresh_route:  # NOT_MASTER...: ask for routes again
            self._routes.move_past(endpoint)
            self._routes.stale = self.config.controller is not None
        return reply

    def _round_trip(self, topic: str, batch: pa.RecordBatch, endpoint: str) -> PutReply:
        try:
            return self._round_trip_on(topic, batch, endpoint)
        except pa.ArrowException as err:
            if "is closed" not in str(err):
                raise
            # another channel dropped the shared connection after a failure (_refresh_route)
            raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                                 f"{endpoint}: {err}") from err

    def _round_trip_on(self, topic: str, batch: pa.RecordBatch, endpoint: str) -> PutReply:
        """One put on a stream to `endpoint`: the producer's per-batch stream (its topics share
        it), or a stream of `topic` to a broker that refuses per-batch streams (v0.1.0: the
        refusal comes before the broker reads a batch, so the batch goes again at once)."""
        if not self._streams.per_batch(endpoint):
            return self._round_trip_via(topic, batch, endpoint, per_batch=False)
        try:
            return self._round_trip_via(topic, batch, endpoint, per_batch=True)
        except flight.FlightError as err:
            if not refuses_per_batch(as_rocketha_error(err)):
                raise
        self._streams.note_single_topic(endpoint)
        return self._round_trip_via(topic, batch, endpoint, per_batch=False)

    def _round_trip_via(self, topic: str, batch: pa.RecordBatch, endpoint: str, *,
                        per_batch: bool) -> PutReply:
        """One put on a (per-batch or `topic`) stream to `endpoint`. With the master watch, the
        whole round trip runs under it, the opening of a new stream included: a stream opened
        to a paused master blocks in do_put until its deadline (gRPC queues the call while
        the channel connects), which a lane whose old stream had rotated, or that had not sent
        to this topic yet, used to wait out (the paused-master tests)."""
        stream_topic = PER_BATCH if per_batch else topic
        shelf = self._shelf(endpoint, stream_topic, batch.schema)
        reused = self._streams.take(shelf)
        opened: list[_Stream] = []
        metadata_out = pa.py_buffer(topic.encode()) if per_batch else None

        def job() -> pa.Buffer:
            stream = reused
            if stream is None:
                stream = self._open_stream(None if per_batch else topic, batch.schema,
                                           endpoint)
                opened.append(stream)
            return _round_trip(stream, batch, metadata_out)

        def close_streams(_: object) -> None:
            for stream in (reused, *opened):
                if stream is not None:
                    close_quietly(stream)

        try:
            if self._round_trips is None:
                metadata = job()
            else:
                metadata = self._round_trips.run(job, lambda: self._replaced(endpoint),
                                                 close_streams)
        except RoundTrips.Abandoned as abandoned:
            # (close_streams closes the stream once the job ends; it is never given back)
            self._routes.stale = True
            raise RetriableError(status_for("NOT_MASTER"), str(abandoned)) from None
        except (flight.FlightError, RocketHAError, OSError, pa.ArrowException):
            close_streams(None)
            raise
        # (interrupted otherwise: the stream may still be in a worker's hands, never given back)
        self._streams.give(shelf, reused if reused is not None else opened[0])
        reply = PutReply.decode(metadata.to_pybytes())
        if reply.status in STORED_NOT_ACKED and self.config.controller is not None:
            self._routes.stale = True  # maybe a deposed or cut-off master: ask again
        return reply

    def _replaced(self, endpoint: str) -> str | None:
        """Why to give up on a put waiting on `endpoint`: the controller names another alive
        master for its replica set (None: keep waiting, also when no controller answers)."""
        assert self.config.controller is not None
        try:
            cluster = controller_cluster_list(self.config.controller,
                                              self.config.master_check_interval_ms,
                                              self.config.tls, self.config.credentials)
        except RetriableError:
            return None
        replacement = replacement_of(cluster, endpoint)
        if replacement is None:
            return None
        return (f"the controller replaced master {endpoint} by {replacement} while a put "
                f"waited on it")

    def _shelf(self, endpoint: str, topic: str, schema: pa.Schema) -> list[_Stream]:
        """The pool's idle streams for (endpoint, topic or PER_BATCH, schema)."""
        last = self._last_shelf
        if (last is not None and last[0] == endpoint and last[1] == topic
                and (last[2] is schema or last[2] == schema)):
            return last[3]
        shelf = self._streams.shelf(endpoint, topic, schema)
        self._last_shelf = (endpoint, topic, schema, shelf)
        return shelf

    def _open_stream(self, topic: str | None, schema: pa.Schema, endpoint: str) -> _Stream:
        """gRPC's deadline covers a whole stream, so a stream lives 2 x request_timeout_ms and
        takes no new batch after the first request_timeout_ms: every put gets its full
        timeout, and a busy stream is never cut mid-batch (that made the client re-send a
        batch the broker had stored). `topic` None: a per-batch stream."""
        timeout_s = self.config.request_timeout_ms / 1000.0
        command = produce_descriptor_command(topic)
        descriptor = flight.FlightDescriptor.for_command(command)
        writer, reader = _connection(endpoint, self.config.tls).do_put(
            descriptor, schema, self._options("DO_PUT", descriptor_target(command, None),
                                              2 * timeout_s))
        return _Stream(writer, reader, time.monotonic() + timeout_s)

    def close(self) -> None:
        if self._own_streams:
            self._streams.close()
        if self._round_trips is not None:
            self._round_trips.close()


def _round_trip(stream: _Stream, batch: pa.RecordBatch,
                topic_metadata: pa.Buffer | None) -> pa.Buffer:
    """Write one batch on a produce stream (on a per-batch stream with its topic's name as
    app_metadata) and read the broker's reply to it."""
    if topic_metadata is None:
        stream.writer.write_batch(batch)
    else:
        stream.writer.write_with_metadata(batch, topic_metadata)
    metadata = stream.reader.read()
    if metadata is None:
        stream.writer.close()  # raises the server's error
        raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                             "produce stream closed without a reply")
    return metadata
