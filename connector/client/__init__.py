"""The client library: Producer, Consumer and Admin over Arrow Flight (connector.protocol is
the wire), usable from Spark executors.

    config.py        ClientConfig (picklable: where the cluster is, TLS, keys), Backoff
    connections.py   Flight connections cached per process, signed call options, typed errors
    discovery.py     the controller group's answers: cluster_list, alive masters, set members
    broker_calls.py  routes to the brokers and the retry policy Admin, Consumer and puts share
    admin.py         Admin (DoAction)
    encoding.py      messages and rows -> produce batches, the idempotence marker
    put_channel.py   a Producer's DoPut streams and retries, the master watch
    producer.py      Producer (lanes, send_async/send, send_batch/put)
    consumer.py      Consumer, PullResult
    producer_core.py, async_sender.py, master_watch.py: the Producer's sans-IO core, its
    threads, and the watch on a late put's master; routes.py: routes for Spark's planning.

Every retry loop is bounded by a count and a deadline; finding the controller leader is the
shared policy in conf/controller_addresses.py.
"""

from __future__ import annotations

from connector.client.admin import Admin
from connector.client.config import Backoff, ClientConfig
from connector.client.connections import as_rocketha_error, signed_options
from connector.client.consumer import Consumer, PullResult
from connector.client.discovery import controller_call, controller_cluster_list
from connector.client.encoding import with_marker
from connector.client.producer import Producer
from connector.client.producer_core import ProducerConfig, SendResult

__all__ = [
    "Admin",
    "Backoff",
    "ClientConfig",
    "Consumer",
    "Producer",
    "ProducerConfig",
    "PullResult",
    "SendResult",
    "as_rocketha_error",
    "controller_call",
    "controller_cluster_list",
    "signed_options",
    "with_marker",
]
