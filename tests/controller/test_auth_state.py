"""Users and ACLs in the controller's replicated state (controller/state.py SetAuth)."""

from __future__ import annotations

import json

from conf.acl import AuthData, Policy, User
from controller.state import ControllerState, SetAuth, decode_command, encode_command

ALICE = User("alice", "AK_alice", "alice-secret-1")


def test_set_auth_is_a_compare_and_set_on_the_version() -> None:
    state = ControllerState()
    first = AuthData().with_user(ALICE)
    assert state.apply(SetAuth(0, first)).status == "OK"
    assert state.auth == first and state.auth.version == 1
    second = first.with_policies([Policy("User:alice", "Topic:t", ("Pub",))])
    # a change computed from an older table is fenced: it would undo the one in between
    assert state.apply(SetAuth(0, second)).status == "FENCED_AUTH_VERSION"
    assert state.apply(SetAuth(1, first)).status == "FENCED_AUTH_VERSION"  # not newer
    assert state.apply(SetAuth(1, second)).status == "OK"
    assert state.auth.policies == second.policies


def test_commands_and_snapshots_carry_the_table() -> None:
    auth = AuthData().with_user(ALICE).with_policies(
        [Policy("User:alice", "Topic:o*", ("Pub", "Sub"), "Allow", ("10.0.0.0/8",))])
    command = SetAuth(0, auth)
    assert decode_command(encode_command(command)) == command
    state = ControllerState()
    state.apply(command)
    restored = ControllerState.restore(state.snapshot())
    assert restored.auth == auth and restored.snapshot() == state.snapshot()
    # a snapshot from before users and ACLs restores an empty table; an untouched table
    # leaves the snapshot as it was
    old = json.dumps({"version": 1, "replica_sets": []}).encode()
    assert ControllerState.restore(old).auth == AuthData()
    assert ControllerState().snapshot() == json.dumps(
        {"version": 1, "replica_sets": []}, separators=(",", ":")).encode()
