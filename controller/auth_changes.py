"""Changes to the replicated users and ACLs: each one a compare-and-set through Raft.

A change is a pure function `AuthData -> AuthData` (raising `AclError` when the request does
not fit the table); `change_auth` reads the table behind a ReadIndex barrier, applies the
function and proposes the result as one `SetAuth` entry fenced by the version it was computed
from. When another change committed first (FENCED_AUTH_VERSION) it starts over from the new
table, up to AUTH_CHANGE_ATTEMPTS times, then answers BUSY. The admin requests
(controller/handlers.py) and the leader's initAuthenticationUser duty
(controller/watchdog.py) both change the table this way.
"""

from __future__ import annotations

from collections.abc import Callable

from conf.acl import AclError, AuthData, Policy, User
from controller.api import (
    AclDeleteRequest,
    AclRequest,
    AuthChangeReply,
    UserNameRequest,
    UserRequest,
)
from controller.raft_shell import RaftShell
from controller.state import SetAuth

__all__ = ["AUTH_CHANGE_ATTEMPTS", "change_auth", "with_acl", "with_user_created",
           "with_user_updated", "without_acl", "without_user"]

AUTH_CHANGE_ATTEMPTS = 3  # a user/ACL change retried when another change committed first


async def change_auth(shell: RaftShell, change: Callable[[AuthData], AuthData]
                      ) -> AuthChangeReply:
    """Apply `change(current table) -> new table` through Raft (compare-and-set on the
    version, retried when another change committed first)."""
    for _ in range(AUTH_CHANGE_ATTEMPTS):
        await shell.read_barrier()
        current = shell.state.auth
        try:
            new = change(current)
        except AclError as err:
            return AuthChangeReply("INVALID_REQUEST", None, current.version, str(err))
        result = await shell.propose(SetAuth(current.version, new))
        if result.status != "FENCED_AUTH_VERSION":
            return AuthChangeReply(result.status, None, shell.state.auth.version)
    return AuthChangeReply("BUSY", shell.leader_address(), shell.state.auth.version)


def with_user_created(auth: AuthData, request: UserRequest) -> AuthData:
    if auth.user(request.name) is not None:
        raise AclError(f"user {request.name} exists (user update changes it)")
    return auth.with_user(User(request.name, request.access_key or request.name,
                               request.secret_key, request.type or "Normal",
                               request.status or "enabled"))


def with_user_updated(auth: AuthData, request: UserRequest) -> AuthData:
    old = auth.user(request.name)
    if old is None:
        raise AclError(f"no user {request.name}")
    return auth.with_user(User(request.name, request.access_key or old.access_key,
                               request.secret_key or old.secret_key,
                               request.type or old.kind, request.status or old.status))


def without_user(auth: AuthData, request: UserNameRequest, *, init_user: User | None
                 ) -> AuthData:
    if auth.user(request.name) is None:
        raise AclError(f"no user {request.name}")
    if init_user is not None and request.name == init_user.name:
        raise AclError(f"{request.name} is initAuthenticationUser (remove that key "
                       "from the controllers' conf first)")
    return auth.without_user(request.name)


def with_acl(auth: AuthData, request: AclRequest, *, create: bool) -> AuthData:
    """acl create/update: one entry per resource for an existing user."""
    name = request.subject.partition(":")[2]
    if auth.user(name) is None:
        raise AclError(f"no user {name!r} (subject {request.subject!r}); create it first")
    if not request.resources:
        raise AclError("no resource")
    policies = [Policy(request.subject, resource, request.actions, request.decision,
                       request.source_ips) for resource in request.resources]
    existing = {policy.key for policy in auth.policies}
    if create and any(policy.key in existing for policy in policies):
        raise AclError(f"{request.subject} already has a policy for one of "
                       f"{list(request.resources)} (acl update replaces it)")
    if not create and any(policy.key not in existing for policy in policies):
        raise AclError(f"{request.subject} has no policy for one of {list(request.resources)} "
                       "(acl create adds it)")
    return auth.with_policies(policies)


def without_acl(auth: AuthData, request: AclDeleteRequest) -> AuthData:
    new = auth.without_policies(request.subject, request.resources)
    if len(new.policies) == len(auth.policies):
        raise AclError(f"no policy of {request.subject} for {list(request.resources)}")
    return new
