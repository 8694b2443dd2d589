"""Where `rocketha-admin`'s data commands go: one broker, or the replica sets the controller
names (their current masters first), so a command after a failover reaches the new master."""

from __future__ import annotations

import dataclasses

from conf.signing import Credentials
from conf.tls import NO_TLS, ClientTLS
from connector.client import Admin, ClientConfig, controller_cluster_list
from connector.client.routes import ControllerRoutes, ReplicaSet, client_config
from connector.errors import RoutesUnavailableError

__all__ = ["Target"]


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the commands go: one broker, or the replica sets the controller names."""

    broker: str | None
    controller: str | None
    timeout_ms: int
    broker_name: str | None = None
    tls: ClientTLS = NO_TLS  # --client-config: its tls.client.* settings
    credentials: Credentials | None = None  # --credentials-file (or --client-config's keys)

    def sets(self) -> list[ReplicaSet]:
        if self.broker is not None:
            name = self.admin_of((self.broker,)).broker_info()["broker_name"]
            return [ReplicaSet(str(name), (self.broker,))]
        assert self.controller is not None
        sets = list(ControllerRoutes(self.controller, self.timeout_ms, self.tls,
                                     self.credentials).replica_sets())
        if self.broker_name is not None:
            sets = [s for s in sets if s.broker_name == self.broker_name]
            if not sets:
                raise RoutesUnavailableError(f"no replica set named {self.broker_name!r} has "
                                             "an alive broker")
        return sets

    def brokers(self) -> list[tuple[str, str]]:
        """(replica set, endpoint) of every alive broker (the one with --broker)."""
        return self.members(all_members=True)

    def members(self, broker_id: int | None = None, *,
                all_members: bool = False) -> list[tuple[str, str]]:
        """(replica set, endpoint) of the brokers a per-broker command goes to: the one with
        --broker; else, in each replica set (--broker-name's), its master, the member
        `broker_id`, or every alive member. A set without that member is an error."""
        if self.broker is not None:
            return [(self.sets()[0].broker_name, self.broker)]
        assert self.controller is not None
        reply = controller_cluster_list(self.controller, self.timeout_ms, self.tls,
                                        self.credentials)
        found = []
        for status in reply.get("replica_sets", []):
            replica = status["replica"]
            name = replica["broker_name"]
            if self.broker_name is not None and name != self.broker_name:
                continue
            alive = set(status.get("alive_broker_ids", []))
            wanted = (alive if all_members else {broker_id} if broker_id is not None
                      else {replica.get("master_broker_id")})
            chosen = [(name, member["broker_address"]) for member in replica["brokers"]
                      if member["broker_id"] in wanted & alive]
            if not chosen and not all_members:
                raise RoutesUnavailableError(
                    f"{name} has no alive " + (f"broker {broker_id}" if broker_id is not None
                                               else "master") + f" (alive: {sorted(alive)})")
            found += chosen
        return found

    def admin_of(self, endpoints: tuple[str, ...]) -> Admin:
        return Admin(client_config(endpoints, self.timeout_ms, self.tls, self.credentials))

    def client_config(self) -> ClientConfig:
        """For produce: the broker, or the controller (the client follows the masters)."""
        if self.broker is not None:
            return ClientConfig(brokers=(self.broker,), request_timeout_ms=self.timeout_ms,
                                send_deadline_ms=3 * self.timeout_ms, **self._keys())
        return ClientConfig(controller=self.controller, request_timeout_ms=self.timeout_ms,
                            send_deadline_ms=3 * self.timeout_ms, **self._keys())

    def _keys(self) -> dict[str, str | None]:
        credentials = self.credentials
        return {"access_key": credentials.access_key if credentials else None,
                "secret_key": credentials.secret_key if credentials else None,
                "tls_trust_cert_path": self.tls.trust_cert_path,
                "tls_cert_path": self.tls.cert_path, "tls_key_path": self.tls.key_path}
