"""The take-over sequence (ha/replication/takeover_core.py): the log's state in, ordered
effects out.

Goal: the steps that make a fenced broker's log the start of a master term, as a table the
production shell (ha/broker/replication.py) and the simulator (tests/sim/cluster_sim.py) both
carry out: cut a partial tail put or record, confirm := log end, offsets, epoch entry, fsync, open
the term, lift the fence; a refusal when the local epoch file is newer than the controller's
epoch. Method: plain calls for the plan; the store's two primitives the plan needs
(`complete_log_position_end`, `cut_tail`) on a real store whose log ends inside a record
(tests/ha/test_partial_put.py: inside a put).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ha.replication.takeover_core import (
    AppendEpoch,
    ConfirmTo,
    CutTail,
    FlushLog,
    LiftFence,
    OpenTerm,
    ReplayState,
    TakeOverLog,
    plan_take_over,
)
from storage_engine import EpochEntry, MessageBatch, MessageStore, StorageError, StoreConfig


def test_a_whole_log_is_confirmed_to_its_end_and_opens_the_term_there() -> None:
    plan = plan_take_over(TakeOverLog(300, 300, (EpochEntry(1, 0),)), 2)
    assert plan.refusal is None
    assert plan.effects == (ConfirmTo(300), ReplayState(300), AppendEpoch(2, 300),
                            FlushLog(300), OpenTerm(2, 300), LiftFence())


def test_a_partial_tail_record_is_cut_first_and_the_term_starts_at_the_cut() -> None:
    plan = plan_take_over(TakeOverLog(310, 300, (EpochEntry(1, 0),)), 3)
    assert plan.effects == (CutTail(300), ConfirmTo(300), ReplayState(300),
                            AppendEpoch(3, 300), FlushLog(300), OpenTerm(3, 300), LiftFence())


def test_an_epoch_entry_inside_the_cut_goes_with_it() -> None:
    # epoch 2 starts at 300, but only part of a record of it arrived: after the cut the log
    # ends in epoch 1, and a retried take-over of epoch 2 must append it again
    plan = plan_take_over(TakeOverLog(310, 300, (EpochEntry(1, 0), EpochEntry(2, 300))), 2)
    assert plan.effects[0] == CutTail(300)
    assert AppendEpoch(2, 300) in plan.effects


def test_a_retried_take_over_does_not_append_its_epoch_twice() -> None:
    plan = plan_take_over(TakeOverLog(300, 300, (EpochEntry(1, 0), EpochEntry(2, 100))), 2)
    assert not [effect for effect in plan.effects if isinstance(effect, AppendEpoch)]
    assert plan.effects[-2:] == (OpenTerm(2, 300), LiftFence())


def test_an_epoch_file_newer_than_the_controllers_epoch_refuses_with_no_effect() -> None:
    plan = plan_take_over(TakeOverLog(310, 300, (EpochEntry(5, 0),)), 4)
    assert plan.effects == ()
    assert plan.refusal is not None and "epoch 5" in plan.refusal


def test_an_empty_log_opens_the_first_term_at_zero() -> None:
    plan = plan_take_over(TakeOverLog(0, 0, ()), 1)
    assert plan.effects == (ConfirmTo(0), ReplayState(0), AppendEpoch(1, 0), FlushLog(0),
                            OpenTerm(1, 0), LiftFence())


def test_the_store_finds_and_cuts_a_partial_tail_record(tmp_path: Path) -> None:
    config = StoreConfig(commit_log_segment_size_bytes=1 << 20, message_size_max_bytes=4096)
    master = MessageStore(tmp_path / "master", config)
    replica = MessageStore(tmp_path / "replica", config, auto_confirm=False)
    try:
        master.append(MessageBatch(topic="t", bodies=[b"a" * 100], queue_ids=[0]))
        master.append(MessageBatch(topic="t", bodies=[b"b" * 100], queue_ids=[0]))
        end = master.log_position_end
        whole = master.read_log(0, end)
        replica.append_replicated(0, whole[:end - 30])  # the second record, in part
        replica.epochs.append(1, 0)
        first_end = replica.complete_log_position_end()
        assert 0 < first_end < end - 30
        with pytest.raises(StorageError):
            replica.cut_tail(first_end + 1)  # only at the end of a whole record
        replica.set_confirm_log_position(end - 30)  # a confirm inside the partial record
        plan = plan_take_over(TakeOverLog(replica.log_position_end,
                                          replica.complete_log_position_end(),
                                          tuple(replica.epochs.entries)), 2)
        assert plan.effects[0] == CutTail(first_end)
        replica.cut_tail(first_end)
        assert replica.log_position_end == first_end
        assert replica.confirm_log_position == first_end  # came down with the cut
        assert replica.read_log(0, first_end) == whole[:first_end]
    finally:
        replica.close()
        master.close()
