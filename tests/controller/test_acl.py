"""The ACL 2.0 decision (conf/acl.py): table tests, RocketMQ's evaluation order."""

from __future__ import annotations

import pytest

from conf.acl import (
    OPERATIONS,
    AclError,
    AuthData,
    Policy,
    User,
    authorize,
    decide,
    parse_resource,
    requirement_of,
)
from connector.protocol import ACTIONS as BROKER_ACTIONS
from controller.api import ACTIONS as CONTROLLER_ACTIONS

ALICE = User("alice", "AK_alice", "alice-secret-1", "Normal")
ROOT = User("root", "AK_root", "root-secret-12", "Super")


def _auth(*policies: Policy, users: tuple[User, ...] = (ALICE, ROOT)) -> AuthData:
    return AuthData(1, users, tuple(policies))


def _allow(resource: str, *actions: str, ips: tuple[str, ...] = ()) -> Policy:
    return Policy("User:alice", resource, actions, "Allow", ips)


def _deny(resource: str, *actions: str) -> Policy:
    return Policy("User:alice", resource, actions, "Deny")


CASES = [
    # (policies, kind, name, action, source ip, allowed)
    ((), "Topic", "orders", "Pub", None, False),  # nothing matching: deny
    ((_allow("Topic:orders", "Pub"),), "Topic", "orders", "Pub", None, True),
    ((_allow("Topic:orders", "Pub"),), "Topic", "orders", "Sub", None, False),
    ((_allow("Topic:orders", "Pub"),), "Topic", "orders2", "Pub", None, False),
    ((_allow("Topic:orders", "All"),), "Topic", "orders", "Delete", None, True),
    ((_allow("Topic:ord*", "Pub"),), "Topic", "orders", "Pub", None, True),
    ((_allow("Topic:ord*", "Pub"),), "Group", "orders", "Pub", None, False),
    ((_allow("Topic:*", "Sub"),), "Topic", "x", "Sub", None, True),
    ((_allow("*", "Get"),), "Cluster", "", "Get", None, True),
    ((_allow("Cluster", "Get"),), "Cluster", "", "Get", None, True),
    ((_allow("Cluster", "Get"),), "Topic", "t", "Get", None, False),
    # most specific wins: literal Deny beats prefix Allow, literal Allow beats prefix Deny
    ((_allow("Topic:ord*", "Pub"), _deny("Topic:orders", "Pub")), "Topic", "orders", "Pub",
     None, False),
    ((_deny("Topic:ord*", "Pub"), _allow("Topic:orders", "Pub")), "Topic", "orders", "Pub",
     None, True),
    # a longer prefix is more specific
    ((_allow("Topic:o*", "Pub"), _deny("Topic:ord*", "Pub")), "Topic", "orders", "Pub",
     None, False),
    ((_deny("Topic:o*", "Pub"), _allow("Topic:ord*", "Pub")), "Topic", "orders", "Pub",
     None, True),
    # Type:* beats *, a prefix beats Type:*
    ((_deny("*", "Pub"), _allow("Topic:*", "Pub")), "Topic", "a", "Pub", None, True),
    ((_deny("Topic:*", "Pub"), _allow("Topic:a*", "Pub")), "Topic", "ab", "Pub", None, True),
    # a Deny that does not cover the action does not count
    ((_allow("Topic:orders", "Pub"), _deny("Topic:orders", "Sub")), "Topic", "orders", "Pub",
     None, True),
    # source addresses
    ((_allow("Topic:t", "Pub", ips=("10.0.0.0/8",)),), "Topic", "t", "Pub", "10.1.2.3", True),
    ((_allow("Topic:t", "Pub", ips=("10.0.0.0/8",)),), "Topic", "t", "Pub", "11.1.2.3", False),
    ((_allow("Topic:t", "Pub", ips=("10.0.0.0/8",)),), "Topic", "t", "Pub", None, False),
    ((_allow("Topic:t", "Pub", ips=("::1",)),), "Topic", "t", "Pub", "::1", True),
]


@pytest.mark.parametrize(("policies", "kind", "name", "action", "ip", "allowed"), CASES)
def test_decide_table(policies: tuple[Policy, ...], kind: str, name: str, action: str,
                      ip: str | None, allowed: bool) -> None:
    assert decide(_auth(*policies), ALICE, kind, name, action, ip).allowed is allowed


def test_deny_wins_a_tie_whatever_the_order() -> None:
    allow = Policy("User:alice", "Topic:t", ("Pub",), "Allow")
    deny = Policy("User:alice", "Topic:t", ("Pub", "Sub"), "Deny")
    # one entry per (subject, resource): the later replaces; a tie needs two resources of one
    # rank, e.g. two equal-length prefixes matching the same name
    a = Policy("User:alice", "Topic:ab*", ("Pub",), "Allow")
    d = Policy("User:alice", "Topic:ab*", ("Pub",), "Deny")
    assert _auth().with_policies([allow, deny]).policies == (deny,)
    auth = AuthData(1, (ALICE,), (a,))
    assert decide(auth, ALICE, "Topic", "abc", "Pub", None).allowed
    # Literal twins cannot exist; the tie rule is checked with the decision function directly
    tie = AuthData(1, (ALICE,), ())
    object.__setattr__(tie, "_by_subject", {"User:alice": [a, d]})
    assert not decide(tie, ALICE, "Topic", "abc", "Pub", None).allowed
    object.__setattr__(tie, "_by_subject", {"User:alice": [d, a]})
    assert not decide(tie, ALICE, "Topic", "abc", "Pub", None).allowed


def test_super_users_are_allowed_everything() -> None:
    auth = _auth(Policy("User:root", "*", ("All",), "Deny"))
    assert decide(auth, ROOT, "Topic", "t", "Delete", None).allowed


def test_every_broker_and_controller_operation_is_in_the_one_table() -> None:
    for action in BROKER_ACTIONS:
        assert requirement_of("broker", action) is not None, action
    for method in ("DoPut", "DoGet", "GetFlightInfo", "ListFlights", "ListActions"):
        assert requirement_of("broker", method) is not None, method
    for action in CONTROLLER_ACTIONS:
        assert requirement_of("controller", action) is not None, action
    assert requirement_of("broker", "no_such_action") is None  # unmapped: denied
    assert all(service in ("broker", "controller") for service, _ in OPERATIONS)


def test_produce_needs_pub_and_consume_needs_sub_on_topic_and_group() -> None:
    put = requirement_of("broker", "DoPut")
    commit = requirement_of("broker", "commit_offset")
    get = requirement_of("broker", "DoGet")
    assert put and commit and get
    auth = _auth(_allow("Topic:t", "Sub"))
    assert not authorize(auth, ALICE, put, {"topic": "t"}, None)[0].allowed
    decision, resource, _ = authorize(auth, ALICE, commit, {"topic": "t", "group": "g"}, None)
    assert not decision.allowed and resource == "Group:g"
    assert authorize(auth, ALICE, get, {"topic": "t"}, None)[0].allowed  # no group named
    assert not authorize(auth, ALICE, get, {"topic": "t", "group": "g"}, None)[0].allowed
    auth = auth.with_policies([_allow("Group:g", "Sub"), _allow("Topic:t", "Pub", "Sub")])
    assert authorize(auth, ALICE, commit, {"topic": "t", "group": "g"}, None)[0].allowed
    assert authorize(auth, ALICE, put, {"topic": "t"}, None)[0].allowed
    # a request that does not name its resource is refused, not waved through
    assert not authorize(auth, ALICE, put, {}, None)[0].allowed


def test_user_admin_is_for_super_users_only() -> None:
    create = requirement_of("controller", "user_create")
    assert create is not None
    auth = _auth(_allow("*", "All"))
    assert not authorize(auth, ALICE, create, {}, None)[0].allowed
    assert authorize(auth, ROOT, create, {}, None)[0].allowed


@pytest.mark.parametrize("text", ["Topic:", "topic:x", "Queue:x", "Topic:a/b", "Topic:../x",
                                  "Topic:a*b", "", "Cluster:x"])
def test_bad_resources_are_refused(text: str) -> None:
    with pytest.raises(AclError):
        parse_resource(text)


@pytest.mark.parametrize("bad", [
    {"subject": "Group:x", "resource": "Topic:t", "actions": ["Pub"]},
    {"subject": "User:x", "resource": "Topic:t", "actions": []},
    {"subject": "User:x", "resource": "Topic:t", "actions": ["Publish"]},
    {"subject": "User:x", "resource": "Topic:t", "actions": ["Pub"], "decision": "Maybe"},
    {"subject": "User:x", "resource": "Topic:t", "actions": ["Pub"], "source_ips": ["x"]},
    {"subject": "User:x", "resource": "Topic:t", "actions": "Pub"},
    ["not", "an", "object"],
])
def test_bad_policies_are_refused(bad: object) -> None:
    with pytest.raises(AclError):
        Policy.from_json(bad)


def test_auth_data_round_trips_and_hides_secrets_on_request() -> None:
    auth = _auth(_allow("Topic:t", "Pub", ips=("10.0.0.0/8",)))
    assert AuthData.from_json(auth.to_json()) == auth
    public = auth.to_json(with_secrets=False)
    assert "secret" not in repr(public).replace("secret_key", "") or all(
        "secret_key" not in user for user in public["users"])
    assert all("secret_key" not in user for user in public["users"])
    assert "alice-secret-1" not in repr(auth)


def test_changes_bump_the_version_and_deleting_a_user_drops_its_policies() -> None:
    auth = AuthData().with_user(ALICE)
    auth = auth.with_policies([_allow("Topic:t", "Pub")])
    assert auth.version == 2
    with pytest.raises(AclError):
        auth.with_user(User("bob", "AK_alice", "bob-secret-12"))  # access key taken
    gone = auth.without_user("alice")
    assert gone.version == 3 and not gone.users and not gone.policies
    assert auth.without_policies("User:alice", ["Topic:other"]).policies == auth.policies
    assert not auth.without_policies("User:alice").policies


def test_users_are_validated() -> None:
    for bad in (("a b", "AK", "12345678"), ("a", "", "12345678"), ("a", "AK", "short")):
        with pytest.raises(AclError):
            User(*bad)
    with pytest.raises(AclError):
        User("a", "AK1", "12345678", "Admin")
