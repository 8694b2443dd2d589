"""Users and ACLs (issue 16): admin -> controller changes, and brokers fetching the table.

Changes go through Raft (`AuthChangeReply.version` is the table's new version). The replies
that carry users or policies use AuthData's own codec (conf/acl.py), so a secret
leaves the controller only in `get_auth_data` (members and Super users only).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from conf.acl import AclError, AuthData, Policy, User
from controller.api.codec import JsonMessage
from controller.errors import CodecError

__all__ = ["AclDeleteRequest", "AclListReply", "AclListRequest", "AclRequest", "AuthChangeReply",
           "AuthDataReply", "UserNameRequest", "UserRequest", "UsersReply"]


@dataclasses.dataclass(frozen=True, slots=True)
class UserRequest(JsonMessage):
    """user_create (every field) / user_update (empty fields keep their value)."""

    KIND: ClassVar[str] = "user request"
    name: str
    access_key: str = ""
    secret_key: str = dataclasses.field(default="", repr=False)
    type: str = ""  # Super | Normal
    status: str = ""  # enabled | disabled


@dataclasses.dataclass(frozen=True, slots=True)
class UserNameRequest(JsonMessage):
    KIND: ClassVar[str] = "user_delete request"
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class AclRequest(JsonMessage):
    """acl_create / acl_update: one entry per resource (replacing the subject's entry for it)."""

    KIND: ClassVar[str] = "acl request"
    subject: str
    resources: tuple[str, ...]
    actions: tuple[str, ...]
    decision: str = "Allow"
    source_ips: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class AclDeleteRequest(JsonMessage):
    """acl_delete: the subject's entries for `resources` (all of them when empty)."""

    KIND: ClassVar[str] = "acl_delete request"
    subject: str
    resources: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class AclListRequest(JsonMessage):
    KIND: ClassVar[str] = "acl_list request"
    subject: str = ""  # "": every subject


@dataclasses.dataclass(frozen=True, slots=True)
class AuthChangeReply(JsonMessage):
    """A user/ACL change: committed through Raft (`version` is the table's new version), or
    refused (`status` INVALID_REQUEST with `message`)."""

    KIND: ClassVar[str] = "auth change reply"
    status: str
    leader_address: str | None = None
    version: int = 0
    message: str = ""


class _AuthJsonReply(JsonMessage):
    """Replies carrying users/policies: their codec is AuthData's (conf/acl.py)."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "leader_address": self.leader_address,  # type: ignore
                **self._payload()}

    def _payload(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, slots=True)
class AuthDataReply(_AuthJsonReply):
    """get_auth_data: the whole table with secrets (members and Super users only)."""

    KIND: ClassVar[str] = "get_auth_data reply"
    status: str
    leader_address: str | None = None
    auth: AuthData | None = None

    def _payload(self) -> dict[str, Any]:
        return {"auth": self.auth.to_json() if self.auth is not None else None}

    @classmethod
    def from_json(cls, body: Any) -> AuthDataReply:
        if not isinstance(body, dict) or not isinstance(body.get("status"), str):
            raise CodecError(cls.KIND, "not a JSON object with a status")
        try:
            auth = AuthData.from_json(body["auth"]) if body.get("auth") is not None else None
        except AclError as err:
            raise CodecError(cls.KIND, str(err)) from None
        leader = body.get("leader_address")
        return cls(body["status"], leader if isinstance(leader, str) else None, auth)


@dataclasses.dataclass(frozen=True, slots=True)
class UsersReply(_AuthJsonReply):
    """user_list: users without their secrets."""

    KIND: ClassVar[str] = "user_list reply"
    status: str
    leader_address: str | None = None
    users: tuple[User, ...] = ()

    def _payload(self) -> dict[str, Any]:
        return {"users": [user.to_json(with_secret=False) for user in self.users]}


@dataclasses.dataclass(frozen=True, slots=True)
class AclListReply(_AuthJsonReply):
    KIND: ClassVar[str] = "acl_list reply"
    status: str
    leader_address: str | None = None
    policies: tuple[Policy, ...] = ()

    def _payload(self) -> dict[str, Any]:
        return {"policies": [policy.to_json() for policy in self.policies]}
