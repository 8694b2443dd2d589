"""Properties of the controller state machine over random command sequences (hypothesis).

Goal: whatever commands arrive, in whatever order, with whatever (stale) epochs: master epochs
never go back and rise on every accepted election; a recorded master is registered and in its
SyncStateSet; SyncStateSet members are registered; a refused command changes nothing; a
snapshot taken at any point restores to an equal state that evolves identically; replaying the
same log gives the same state (determinism). Method: hypothesis draws command lists over a
small id space so that collisions, stale epochs and re-registrations are common.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    CleanBrokerData,
    Command,
    ControllerState,
    ElectMaster,
    decode_command,
    encode_command,
)

SETS = st.sampled_from(["a", "b"])
IDS = st.integers(min_value=0, max_value=4)
EPOCHS = st.integers(min_value=0, max_value=5)

COMMANDS = st.one_of(
    st.builds(ApplyBrokerId, st.just("c"), SETS, st.sampled_from([f"h:{p}" for p in range(4)])),
    st.builds(ElectMaster, SETS, EPOCHS, st.one_of(st.none(), IDS)),
    st.builds(AlterSyncStateSet, SETS, IDS, EPOCHS,
              st.lists(IDS, max_size=4).map(tuple), EPOCHS),
    st.builds(CleanBrokerData, SETS, st.lists(IDS, max_size=2, unique=True).map(tuple)),
)


def _check_invariants(state: ControllerState) -> None:
    for info in state.replica_infos():
        ids = {m.broker_id for m in info.brokers}
        assert set(info.sync_state_set) <= ids
        if info.master_broker_id is not None:
            assert info.master_broker_id in ids
            assert info.master_broker_id in info.sync_state_set
        assert list(info.sync_state_set) == sorted(set(info.sync_state_set))


@settings(max_examples=150, deadline=None)
@given(st.lists(COMMANDS, max_size=40), st.integers(min_value=0, max_value=40))
def test_random_command_sequences_keep_the_invariants(commands: list[Command],
                                                      snapshot_at: int) -> None:
    state = ControllerState()
    restored: ControllerState | None = None
    for position, command in enumerate(commands):
        if position == snapshot_at:
            restored = ControllerState.restore(state.snapshot())
        before = {i.broker_name: i for i in state.replica_infos()}
        result = state.apply(command)
        if restored is not None:
            assert restored.apply(command) == result
        after = {i.broker_name: i for i in state.replica_infos()}
        old, new = before.get(command.broker_name), after.get(command.broker_name)
        if result.status not in ("OK", "MASTER_NOT_AVAILABLE"):
            assert old == new, f"refused {command} changed the state"
        if old is not None and new is not None:
            assert new.master_epoch >= old.master_epoch
            assert new.sync_state_set_epoch >= old.sync_state_set_epoch
            if isinstance(command, ElectMaster) and result.status in (
                    "OK", "MASTER_NOT_AVAILABLE"):
                assert new.master_epoch == old.master_epoch + 1
        _check_invariants(state)
    replayed = ControllerState()
    for command in commands:
        replayed.apply(decode_command(encode_command(command)))
    assert replayed.snapshot() == state.snapshot()
    if restored is not None:
        assert restored.snapshot() == state.snapshot()
