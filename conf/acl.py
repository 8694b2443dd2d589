"""Users and ACL 2.0 policies, and the one decision function (pure; RocketMQ 5.3's model).

In conf (it imports the standard library only) because it is the contract between brokers and
the controller: both gates (conf/auth_gate.py) decide with this one function, so a broker
evaluates exactly what the controller evaluates; `controller.api` re-exports it for the
messages that carry the table.

    User      name, access_key, secret_key, kind Super | Normal, status enabled | disabled
    Policy    subject "User:<name>", resource, actions, decision Allow | Deny, source CIDRs
    Resource  "Topic:<name>" | "Group:<name>" | "Cluster" | "*"; a name ending in "*" is a
              prefix ("Topic:orders*"), "Topic:*" any topic
    Action    Pub Sub Create Update Delete Get List All ("All" in a policy covers every action)

`decide(auth, principal, resource, action, source_ip)` follows RocketMQ's evaluation: a Super
user is allowed everything; otherwise, among the principal's policies whose resource matches,
whose actions cover the action and whose source addresses (if any) hold the caller's, the most
specific resource wins (literal > longer prefix > "<Type>:*" > "*"), Deny wins a tie, and
nothing matching means deny.

What each request needs is one table, OPERATIONS: (service, operation) -> Requirement, for the
broker's Flight calls and actions and the controller's actions. An operation missing from it
is denied (`requirement_of` returns None). A Requirement is either "any authenticated caller",
"Super only", or a list of checks (resource kind, request field naming it, accepted actions);
`member` marks calls a cluster member (a broker or controller proved by its TLS certificate)
may make without a user.

AuthData is the whole replicated value (users, policies, a version that grows on every change)
with a strict JSON codec: the controller's state machine holds it, brokers cache the copy the
controller serves them (`get_auth_data`), and static mode reads it from `aclFile`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ACTIONS_ACL",
    "ADMIN_OPERATIONS",
    "OPERATIONS",
    "AclError",
    "AuthData",
    "Check",
    "Decision",
    "Policy",
    "Requirement",
    "Resource",
    "User",
    "authorize",
    "decide",
    "parse_resource",
    "requirement_of",
]

ACTIONS_ACL = ("Pub", "Sub", "Create", "Update", "Delete", "Get", "List", "All")
USER_TYPES = ("Super", "Normal")
USER_STATUSES = ("enabled", "disabled")
DECISIONS = ("Allow", "Deny")
RESOURCE_TYPES = ("Topic", "Group")
USERS_MAX = 5_000  # the whole table is one Raft entry per change (raftFrameBytesMax)
POLICIES_MAX = 10_000
SOURCE_IPS_MAX = 64
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_KEY = re.compile(r"^[A-Za-z0-9_.@+/=-]{1,128}$")
_RESOURCE_NAME = re.compile(r"^[%|A-Za-z0-9_-]{1,127}\*?$|^\*$")


class AclError(ValueError):
    """A user, policy or auth document that is not valid; the message says which field."""


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    name: str
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    kind: str = "Normal"  # Super | Normal
    status: str = "enabled"

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise AclError(f"user name {self.name[:70]!r} must match {_NAME.pattern}")
        if not _KEY.match(self.access_key):
            raise AclError(f"user {self.name}: accessKey must match {_KEY.pattern}")
        if not 8 <= len(self.secret_key) <= 256 or not self.secret_key.isprintable():
            raise AclError(f"user {self.name}: secretKey must be 8..256 printable characters")
        if self.kind not in USER_TYPES:
            raise AclError(f"user {self.name}: type must be one of {USER_TYPES}")
        if self.status not in USER_STATUSES:
            raise AclError(f"user {self.name}: status must be one of {USER_STATUSES}")

    @property
    def enabled(self) -> bool:
        return self.status == "enabled"

    def to_json(self, *, with_secret: bool = True) -> dict[str, Any]:
        body = {"name": self.name, "access_key": self.access_key, "type": self.kind,
                "status": self.status}
        if with_secret:
            body["secret_key"] = self.secret_key
        return body

    @classmethod
    def from_json(cls, body: Any) -> User:
        obj = _object(body, "user")
        return cls(_str(obj, "name", "user"), _str(obj, "access_key", "user"),
                   _str(obj, "secret_key", "user"), _str(obj, "type", "user", "Normal"),
                   _str(obj, "status", "user", "enabled"))


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """A parsed policy resource: kind ("Topic", "Group", "Cluster", "*"), name, is_prefix."""

    kind: str
    name: str = ""
    prefix: bool = False

    def matches(self, kind: str, name: str) -> bool:
        if self.kind == "*":
            return True
        if self.kind != kind:
            return False
        if kind == "Cluster":
            return True
        return name.startswith(self.name) if self.prefix else name == self.name

    def specificity(self) -> tuple[int, int]:
        """Larger is more specific: literal > prefix (longer first) > Type:* > *."""
        if self.kind == "*":
            return (0, 0)
        if self.kind == "Cluster" or not self.prefix:
            return (3, 0)
        if not self.name:
            return (1, 0)
        return (2, len(self.name))


def parse_resource(text: str) -> Resource:
    if text == "*":
        return Resource("*")
    if text == "Cluster":
        return Resource("Cluster")
    kind, sep, name = text.partition(":")
    if not sep or kind not in RESOURCE_TYPES or not _RESOURCE_NAME.match(name):
        raise AclError(f"resource {text[:80]!r} must be Topic:<name>, Group:<name> (a name "
                       "may end in * for a prefix), Cluster or *")
    if name.endswith("*"):
        return Resource(kind, name[:-1], True)
    return Resource(kind, name)


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """One entry: subject may do `actions` on `resource` (Allow) or may not (Deny)."""

    subject: str  # "User:<name>"
    resource: str
    actions: tuple[str, ...]
    decision: str = "Allow"
    source_ips: tuple[str, ...] = ()  # CIDRs or addresses; empty: any
    parsed: Resource = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind, sep, name = self.subject.partition(":")
        if kind != "User" or not sep or not _NAME.match(name):
            raise AclError(f"subject {self.subject[:80]!r} must be User:<name>")
        object.__setattr__(self, "parsed", parse_resource(self.resource))
        if not self.actions or any(a not in ACTIONS_ACL for a in self.actions):
            raise AclError(f"actions {list(self.actions)[:10]} must be some of {ACTIONS_ACL}")
        if self.decision not in DECISIONS:
            raise AclError(f"decision {self.decision[:20]!r} must be Allow or Deny")
        if len(self.source_ips) > SOURCE_IPS_MAX:
            raise AclError(f"more than {SOURCE_IPS_MAX} source addresses")
        for cidr in self.source_ips:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as err:
                raise AclError(f"source address {cidr[:60]!r}: {err}") from None

    @property
    def key(self) -> tuple[str, str]:
        """A subject has at most one entry per resource (a create for the same resource
        replaces it, as RocketMQ's acl update does)."""
        return (self.subject, self.resource)

    def covers(self, action: str, source_ip: str | None) -> bool:
        if action not in self.actions and "All" not in self.actions:
            return False
        if not self.source_ips:
            return True
        if source_ip is None:
            return False
        try:
            address = ipaddress.ip_address(source_ip)
        except ValueError:
            return False
        return any(address in ipaddress.ip_network(cidr, strict=False)
                   for cidr in self.source_ips)

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "resource": self.resource,
                "actions": list(self.actions), "decision": self.decision,
                "source_ips": list(self.source_ips)}

    @classmethod
    def from_json(cls, body: Any) -> Policy:
        obj = _object(body, "policy")
        return cls(_str(obj, "subject", "policy"), _str(obj, "resource", "policy"),
                   _strs(obj, "actions", "policy"), _str(obj, "decision", "policy", "Allow"),
                   _strs(obj, "source_ips", "policy", ()))


@dataclasses.dataclass(frozen=True, slots=True)
class AuthData:
    """Every user and policy, and a version that grows with every change (brokers refresh
    their copy when the controller reports a newer one)."""

    version: int = 0
    users: tuple[User, ...] = ()  # sorted by name
    policies: tuple[Policy, ...] = ()  # sorted by (subject, resource)
    _by_key: dict[str, User] = dataclasses.field(init=False, repr=False, compare=False)
    _by_subject: dict[str, list[Policy]] = dataclasses.field(init=False, repr=False,
                                                              compare=False)

    def __post_init__(self) -> None:
        if len(self.users) > USERS_MAX or len(self.policies) > POLICIES_MAX:
            raise AclError(f"at most {USERS_MAX} users and {POLICIES_MAX} policies")
        names = [u.name for u in self.users]
        keys = [u.access_key for u in self.users]
        if len(set(names)) != len(names) or len(set(keys)) != len(keys):
            raise AclError("user names and access keys must be unique")
        object.__setattr__(self, "_by_key", {u.access_key: u for u in self.users})
        by_subject: dict[str, list[Policy]] = {}
        for policy in self.policies:
            by_subject.setdefault(policy.subject, []).append(policy)
        object.__setattr__(self, "_by_subject", by_subject)

    def user_by_access_key(self, access_key: str) -> User | None:
        return self._by_key.get(access_key)

    def user(self, name: str) -> User | None:
        return next((u for u in self.users if u.name == name), None)

    def policies_of(self, subject: str) -> list[Policy]:
        return self._by_subject.get(subject, [])

    # -- changes (each returns a new value, version + 1) --------------------------------------
    def with_user(self, user: User) -> AuthData:
        others = tuple(u for u in self.users if u.name != user.name)
        if any(u.access_key == user.access_key for u in others):
            raise AclError(f"accessKey of user {user.name} is used by another user")
        users = tuple(sorted((*others, user), key=lambda u: u.name))
        return AuthData(self.version + 1, users, self.policies)

    def without_user(self, name: str) -> AuthData:
        """Deletes the user and its policies."""
        subject = f"User:{name}"
        return AuthData(self.version + 1, tuple(u for u in self.users if u.name != name),
                        tuple(p for p in self.policies if p.subject != subject))

    def with_policies(self, policies: Iterable[Policy]) -> AuthData:
        new = {p.key: p for p in self.policies}
        for policy in policies:
            new[policy.key] = policy
        return AuthData(self.version + 1, self.users, tuple(new[k] for k in sorted(new)))

    def without_policies(self, subject: str, resources: Iterable[str] = ()) -> AuthData:
        """Deletes the subject's entries for `resources` (every entry when empty)."""
        gone = set(resources)
        kept = tuple(p for p in self.policies
                     if p.subject != subject or (gone and p.resource not in gone))
        return AuthData(self.version + 1, self.users, kept)

    # -- codec ---------------------------------------------------------------------------------
    def to_json(self, *, with_secrets: bool = True) -> dict[str, Any]:
        return {"version": self.version,
                "users": [u.to_json(with_secret=with_secrets) for u in self.users],
                "policies": [p.to_json() for p in self.policies]}

    @classmethod
    def from_json(cls, body: Any) -> AuthData:
        obj = _object(body, "auth data")
        version = obj.get("version", 0)
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version < 2**63:
            raise AclError("auth data: version must be a non-negative 64-bit integer")
        users = obj.get("users", [])
        policies = obj.get("policies", [])
        if not isinstance(users, list) or not isinstance(policies, list):
            raise AclError("auth data: users and policies must be lists")
        if len(users) > USERS_MAX or len(policies) > POLICIES_MAX:
            raise AclError(f"at most {USERS_MAX} users and {POLICIES_MAX} policies")
        return cls(version, tuple(sorted((User.from_json(u) for u in users),
                                         key=lambda u: u.name)),
                   tuple(sorted((Policy.from_json(p) for p in policies),
                                key=lambda p: p.key)))


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str  # for the audit log and the error message


def decide(auth: AuthData, user: User, kind: str, name: str, action: str,
           source_ip: str | None) -> Decision:
    """May `user` do `action` on resource (kind, name) from `source_ip`? RocketMQ's rule."""
    if user.kind == "Super":
        return Decision(True, "super user")
    best: tuple[int, int] | None = None
    best_deny = False
    for policy in auth.policies_of(f"User:{user.name}"):
        resource = policy.parsed
        if not resource.matches(kind, name) or not policy.covers(action, source_ip):
            continue
        rank = resource.specificity()
        if best is None or rank > best:
            best, best_deny = rank, policy.decision == "Deny"
        elif rank == best and policy.decision == "Deny":
            best_deny = True  # Deny wins a tie
    target = kind if kind == "Cluster" else f"{kind}:{name}"
    if best is None:
        return Decision(False, f"no policy allows {action} on {target}")
    if best_deny:
        return Decision(False, f"a policy denies {action} on {target}")
    return Decision(True, f"a policy allows {action} on {target}")


# -- what each request needs ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    kind: str  # Topic | Group | Cluster
    field: str  # the request field naming the resource ("" for Cluster)
    actions: tuple[str, ...]  # any one of them suffices
    optional: bool = False  # skipped when the request does not name the field


@dataclasses.dataclass(frozen=True, slots=True)
class Requirement:
    checks: tuple[Check, ...] = ()
    super_only: bool = False
    member: bool = False  # a cluster member's certificate identity may call it

    @property
    def authenticated_only(self) -> bool:
        return not self.checks and not self.super_only


def _needs(*checks: Check, member: bool = False) -> Requirement:
    return Requirement(tuple(checks), member=member)


_ANY_USER = Requirement()
_SUPER = Requirement(super_only=True)
_SUPER_OR_MEMBER = Requirement(super_only=True, member=True)
_CLUSTER_GET = Check("Cluster", "", ("Get",))
_CLUSTER_UPDATE = Check("Cluster", "", ("Update",))

# (service, operation): what it needs. Operations are Flight methods (DoPut, DoGet,
# GetFlightInfo, ListFlights, ListActions) and DoAction types. Missing: denied.
OPERATIONS: dict[tuple[str, str], Requirement] = {
    # broker: data plane
    ("broker", "DoPut"): _needs(Check("Topic", "topic", ("Pub",))),
    ("broker", "DoGet"): _needs(Check("Topic", "topic", ("Sub",)),
                                Check("Group", "group", ("Sub",), optional=True)),
    ("broker", "GetFlightInfo"): _needs(Check("Topic", "topic", ("Sub", "Get"))),
    # listings: any authenticated caller; the broker lists only the topics the caller may
    # Pub, Sub or Get (clients discover their topics with these)
    ("broker", "ListFlights"): _ANY_USER,
    ("broker", "ListActions"): _ANY_USER,
    # broker: actions
    # identity, role and positions: what a client needs to find masters (like cluster_list)
    ("broker", "broker_info"): Requirement(member=True),
    ("broker", "broker_stats"): _needs(_CLUSTER_GET),
    ("broker", "commit_offset"): _needs(Check("Topic", "topic", ("Sub",)),
                                        Check("Group", "group", ("Sub",))),
    ("broker", "consumer_groups"): _needs(Check("Cluster", "", ("List", "Get"))),
    ("broker", "delete_group"): _needs(Check("Group", "group", ("Delete",))),
    ("broker", "get_config"): _needs(_CLUSTER_GET),
    ("broker", "set_config"): _needs(_CLUSTER_UPDATE),
    ("broker", "shutdown"): _needs(_CLUSTER_UPDATE),
    ("broker", "handover"): _needs(_CLUSTER_UPDATE),
    ("broker", "create_topic"): _needs(Check("Topic", "topic", ("Create",))),
    ("broker", "delete_topic"): _needs(Check("Topic", "topic", ("Delete",))),
    ("broker", "get_topic"): _needs(Check("Topic", "topic", ("Get",))),
    ("broker", "list_topics"): _ANY_USER,  # filtered, as ListFlights
    ("broker", "offset_for_timestamp"): _needs(Check("Topic", "topic", ("Sub", "Get"))),
    ("broker", "query_offsets"): _needs(Check("Topic", "topic", ("Sub", "Get")),
                                        Check("Group", "group", ("Sub", "Get"))),
    ("broker", "queue_offsets"): _needs(Check("Topic", "topic", ("Sub", "Pub", "Get"))),
    ("broker", "update_topic"): _needs(Check("Topic", "topic", ("Update",))),
    # controller: members (brokers) and operators
    ("controller", "register_broker"): Requirement((_CLUSTER_UPDATE,), member=True),
    ("controller", "broker_heartbeat"): Requirement((_CLUSTER_UPDATE,), member=True),
    ("controller", "get_replica_info"): Requirement((_CLUSTER_GET,), member=True),
    ("controller", "alter_sync_state_set"): Requirement((_CLUSTER_UPDATE,), member=True),
    ("controller", "handover_master"): Requirement((_CLUSTER_UPDATE,), member=True),
    ("controller", "elect_master"): _needs(_CLUSTER_UPDATE),
    ("controller", "clean_broker_data"): _needs(Check("Cluster", "", ("Delete",))),
    ("controller", "get_routes"): _needs(Check("Topic", "topic", ("Pub", "Sub", "Get")),
                                         member=True),
    # clients find masters and the leader with these: any authenticated caller
    ("controller", "cluster_list"): Requirement(member=True),
    ("controller", "controller_status"): Requirement(member=True),
    ("controller", "transfer_leader"): _needs(_CLUSTER_UPDATE),
    # users and ACLs: Super users only (a broker fetches the table with its member identity
    # or its inner credentials, a Super user)
    ("controller", "get_auth_data"): _SUPER_OR_MEMBER,
    ("controller", "user_create"): _SUPER,
    ("controller", "user_update"): _SUPER,
    ("controller", "user_delete"): _SUPER,
    ("controller", "user_list"): _SUPER,
    ("controller", "acl_create"): _SUPER,
    ("controller", "acl_update"): _SUPER,
    ("controller", "acl_delete"): _SUPER,
    ("controller", "acl_list"): _SUPER,
}


# audited when allowed too (refusals are always audited)
ADMIN_OPERATIONS = frozenset({
    ("broker", "create_topic"), ("broker", "update_topic"), ("broker", "delete_topic"),
    ("broker", "delete_group"), ("broker", "set_config"), ("broker", "shutdown"),
    ("broker", "handover"), ("controller", "elect_master"), ("controller", "handover_master"),
    ("controller", "clean_broker_data"), ("controller", "transfer_leader"),
    ("controller", "user_create"),
    ("controller", "user_update"), ("controller", "user_delete"),
    ("controller", "acl_create"), ("controller", "acl_update"), ("controller", "acl_delete"),
})


def requirement_of(service: str, operation: str) -> Requirement | None:
    return OPERATIONS.get((service, operation))


def authorize(auth: AuthData, user: User, requirement: Requirement,
              request: Mapping[str, Any], source_ip: str | None
              ) -> tuple[Decision, str, str]:
    """The decision for `user` on a request (its fields name the resources), with the
    resource and action of the first refused check (or of the last one when allowed)."""
    if user.kind == "Super":  # allowed; the resource is named for the audit log
        for check in requirement.checks:
            value = request.get(check.field) if check.field else ""
            if isinstance(value, str):
                resource = check.kind if check.kind == "Cluster" else f"{check.kind}:{value}"
                return Decision(True, "super user"), resource, "|".join(check.actions)
        return Decision(True, "super user"), "Cluster", "*"
    if requirement.super_only:
        return Decision(False, "only a Super user may do this"), "Cluster", "All"
    resource, action = "Cluster", "*"
    allowed = Decision(True, "authenticated")
    for check in requirement.checks:
        name = ""
        if check.field:
            value = request.get(check.field)
            if value is None and check.optional:
                continue
            if not isinstance(value, str) or not value:
                return (Decision(False, f"request names no {check.kind} ({check.field!r})"),
                        check.kind, check.actions[0])
            name = value
        resource = check.kind if check.kind == "Cluster" else f"{check.kind}:{name}"
        first: Decision | None = None
        for one in check.actions:  # any one suffices: stop at the first allowed
            decision = decide(auth, user, check.kind, name, one, source_ip)
            first = first or decision
            if decision.allowed:
                break
        assert first is not None
        action = "|".join(check.actions)
        if not decision.allowed:
            return first, resource, action
        allowed = decision
    return allowed, resource, action


# -- strict JSON helpers ------------------------------------------------------------------------

def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise AclError(f"{what}: not a JSON object")
    return body


def _str(obj: Mapping[str, Any], key: str, what: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str) or len(value) > 512:
        raise AclError(f"{what}: {key} must be a string of at most 512 characters")
    return value


def _strs(obj: Mapping[str, Any], key: str, what: str,
          default: tuple[str, ...] | None = None) -> tuple[str, ...]:
    value = obj.get(key, default)
    if isinstance(value, tuple):
        return value
    if not isinstance(value, list) or len(value) > SOURCE_IPS_MAX or not all(
            isinstance(v, str) and len(v) <= 128 for v in value):
        raise AclError(f"{what}: {key} must be a list of at most {SOURCE_IPS_MAX} strings")
    return tuple(value)
