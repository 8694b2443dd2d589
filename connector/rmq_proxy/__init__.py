"""RocketMQ 5 clients on rocketha: a gRPC endpoint speaking `apache.rocketmq.v2.MessagingService`.

`rocketha-proxy` is a separate process and a client of the cluster (connector.client: routes
from the controllers, puts and pulls over Arrow Flight), so it follows failovers as our
Producer and Consumer do. Its modules, leaves first:

    config.py       ProxyConfig (grpcListenPort, controllerAddr, limits)
    codes.py        our statuses -> apache.rocketmq.v2.Code
    receipt.py      HMAC'd receipt handles
    auth.py         the clients' AK/SK signature (authorization header, clock skew)
    users.py        the controller's users as the SecretLookup of auth.py (get_auth_data)
    pop_core.py     sans-IO POP state (leases, acks, redelivery) and its records
    messages.py     RocketMQ messages <-> rocketha rows (keys, tag, properties, message id)
    replies.py      Status and Duration helpers
    cluster_io.py   routes, members, pooled producers, pulls
    state_store.py  the POP records in the replicated topic rmq_sys_rocketha_pop_state
    pop_service.py  receive / ack / change / dead-letter (POP) over the state store
    service.py      the MessagingService servicer (routes, telemetry, send; POP delegated)
    main.py         the entry point

It imports the generated protobuf/gRPC modules of the PyPI package `rocketmq-python-client`
(the `rocketmq` extra); nothing else of rocketha imports this package.
"""

from __future__ import annotations

from connector.rmq_proxy.config import ProxyConfig, ProxyConfigError

# main and serve (connector.rmq_proxy.main) need the rocketmq extra: not imported here, so
# that `python -m connector.rmq_proxy` checks the extra before anything imports grpc.
__all__ = ["ProxyConfig", "ProxyConfigError"]
