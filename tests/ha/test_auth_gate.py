"""The broker's AuthGate at its IO boundary (a fake Flight call context): who the caller is.

The TLS side relies on `principal_of(context)`: an unsigned call from a client whose
certificate names a cluster member (`context.peer_identity()`, a rocketha://broker/... or
rocketha://controller/... URI; a tool's rocketha://client/... is none) is that member,
allowed the operations the table marks for members only; unsigned and anonymous is refused;
a signed call is its user."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pyarrow import flight

from conf.auth_gate import MIDDLEWARE_KEY
from conf.signing import Credentials, action_target, sign_headers
from conf.tls import broker_identity, client_identity, controller_identity
from controller.api import AuthData, User
from ha.broker.auth import AuthGate, AuthSettings

ALICE = User("alice", "AK_alice", "alice-secret-0123")


class FakeContext:
    def __init__(self, middleware: Any = None, identity: bytes = b"") -> None:
        self._middleware = middleware
        self._identity = identity

    def get_middleware(self, key: str) -> Any:
        assert key == MIDDLEWARE_KEY
        return self._middleware

    def peer_identity(self) -> bytes:
        return self._identity

    def peer(self) -> str:
        return "ipv4:10.1.2.3:5555"


def _gate() -> AuthGate:
    return AuthGate(AuthSettings(authentication_enabled=True, authorization_enabled=True),
                    AuthData(1, (ALICE,), ()))


BROKER = broker_identity("broker-a", "127.0.0.1:10911").encode()


def test_an_unsigned_member_certificate_is_a_member_for_member_operations_only() -> None:
    gate = _gate()
    member = FakeContext(identity=BROKER)
    principal = gate.check(member, "broker_info", "DO_ACTION", b"", {})
    assert principal.name == f"Member:{BROKER.decode()}" and principal.member
    controller = FakeContext(identity=controller_identity(2).encode())
    assert gate.check(controller, "broker_info", "DO_ACTION", b"", {}).member
    with pytest.raises(flight.FlightUnauthorizedError, match="not a member operation"):
        gate.check(member, "delete_topic", "DO_ACTION", b"", {"topic": "t"})
    with pytest.raises(flight.FlightUnauthenticatedError, match="unsigned"):
        gate.check(FakeContext(identity=b"CN=someone"), "broker_info", "DO_ACTION", b"", {})


def test_a_tools_client_certificate_is_no_member() -> None:
    """rocketha-cluster gives the tools rocketha://client/admin: a certificate of the cluster
    CA, but no member; unsigned, its calls are refused (merging TLS and auth: the gate first
    took every rocketha:// identity for a member)."""
    gate = _gate()
    for identity in (client_identity("admin"), "rocketha://broker/broker-a/1",
                     "rocketha://controller/x"):
        with pytest.raises(flight.FlightUnauthenticatedError, match="unsigned"):
            gate.check(FakeContext(identity=identity.encode()), "broker_info", "DO_ACTION",
                       b"", {})


def test_a_signed_call_is_its_user_and_its_source_is_audited() -> None:
    gate = _gate()
    body = b'{"topic":"t"}'
    target = action_target("create_topic", body)
    pairs = sign_headers(Credentials(ALICE.access_key, ALICE.secret_key), "DO_ACTION", target,
                         int(time.time() * 1000))
    found = gate.verify_headers({k.decode(): [v.decode()] for k, v in pairs}, "DO_ACTION")
    context = FakeContext(found, identity=BROKER)  # signature first
    assert gate.principal_of(context, "DO_ACTION", target).name == "User:alice"
    with pytest.raises(flight.FlightUnauthorizedError, match="NO_PERMISSION"):
        gate.check(context, "create_topic", "DO_ACTION", target, {"topic": "t"})
    assert gate.refused == 1


def _signed(gate: AuthGate, credentials: Credentials, target: bytes) -> FakeContext:
    pairs = sign_headers(credentials, "DO_ACTION", target, int(time.time() * 1000))
    return FakeContext(gate.verify_headers({k.decode(): [v.decode()] for k, v in pairs},
                                           "DO_ACTION"))


def test_before_the_first_table_an_unknown_user_is_busy_and_a_wrong_secret_still_refused(
        ) -> None:
    """A broker in controller mode whose table may be stale (none yet, or a cached one) says
    "retry" to an access key it does not know, never "unknown": the controller may know it."""
    gate = AuthGate(AuthSettings(authentication_enabled=True), AuthData(1, (ALICE,), ()))
    gate.table_current = False
    target = action_target("broker_info", b"{}")
    bob = Credentials("AK_bob", "bob-secret-0123456789")
    with pytest.raises(flight.FlightUnavailableError, match=r"BUSY.*not loaded yet"):
        gate.principal_of(_signed(gate, bob, target), "DO_ACTION", target)
    wrong = Credentials(ALICE.access_key, "not-alice-secret-0123")  # a user it knows: refused
    with pytest.raises(flight.FlightUnauthenticatedError, match="signature does not match"):
        gate.principal_of(_signed(gate, wrong, target), "DO_ACTION", target)
    gate.auth_data = AuthData(2, (ALICE, User("bob", bob.access_key, bob.secret_key)), ())
    assert gate.principal_of(_signed(gate, bob, target), "DO_ACTION", target).name == "User:bob"
    gate.auth_data, gate.table_current = AuthData(3, (ALICE,), ()), True
    with pytest.raises(flight.FlightUnauthenticatedError, match="unknown or disabled"):
        gate.principal_of(_signed(gate, bob, target), "DO_ACTION", target)
