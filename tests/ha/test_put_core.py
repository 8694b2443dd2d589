"""The put path's statuses (ha/replication/put_core.py): facts in, the client's status (or
wait on) out.

Goal: the answers replication.py and the simulator's broker both give, as tables: who may take
a write, the refusal before any write, the flush and quorum outcomes, and that a PUT_OK reached
while the broker was deposed is never one. Method: plain calls.
"""

from __future__ import annotations

import pytest

from ha.replication.master_core import PutProgress
from ha.replication.put_core import (
    Admission,
    admit,
    answer,
    flush_status,
    plan_status,
    quorum_status,
)
from ha.replication.quorum import PutPlan
from storage_engine import PutStatus


@pytest.mark.parametrize(("fenced", "following", "serving", "runtime_roles", "expected"), [
    (True, False, True, True, Admission.FENCED),  # the fence wins over a running service
    (True, True, False, True, Admission.FENCED),
    (False, True, False, False, Admission.SLAVE),  # static mode: a slave
    (False, False, False, True, Admission.CHANGING_ROLE),  # controller mode, no service yet
    (False, False, False, False, Admission.STANDALONE),  # one replica: no replication
    (False, False, True, True, Admission.REPLICATE),
    (False, False, True, False, Admission.REPLICATE),
])
def test_admission(fenced: bool, following: bool, serving: bool, runtime_roles: bool,
                   expected: Admission) -> None:
    got = admit(fenced=fenced, following=following, serving=serving,
                runtime_roles=runtime_roles)
    assert got is expected
    assert got.refused == (expected not in (Admission.STANDALONE, Admission.REPLICATE))


def test_a_refused_plan_writes_nothing() -> None:
    refused = PutPlan(need=2, in_sync=1, refused="1 in sync, 2 needed")
    assert plan_status(refused) is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
    assert plan_status(PutPlan(need=2, in_sync=2)) is None


@pytest.mark.parametrize(("durable", "expired", "deposed", "expected"), [
    (True, True, True, None),  # durable: the quorum decides
    (False, False, False, None),  # wait on
    (False, True, False, PutStatus.FLUSH_DISK_TIMEOUT),
    (False, True, True, PutStatus.FLUSH_DISK_TIMEOUT),
    (False, False, True, PutStatus.FLUSH_SLAVE_TIMEOUT),  # its fate is the new master's
])
def test_flush(durable: bool, expired: bool, deposed: bool, expected: PutStatus | None) -> None:
    assert flush_status(durable, expired=expired, deposed=deposed) is expected


@pytest.mark.parametrize(("progress", "expired", "stopping", "expected"), [
    (PutProgress.DONE, True, True, PutStatus.PUT_OK),  # held by enough: done, even late
    (PutProgress.UNREACHABLE, False, False, PutStatus.SLAVE_NOT_AVAILABLE),
    (PutProgress.WAITING, False, False, None),
    (PutProgress.WAITING, True, False, PutStatus.FLUSH_SLAVE_TIMEOUT),
    (PutProgress.WAITING, False, True, PutStatus.FLUSH_SLAVE_TIMEOUT),
    (None, False, False, PutStatus.FLUSH_SLAVE_TIMEOUT),  # no master service any more
])
def test_quorum(progress: PutProgress | None, expired: bool, stopping: bool,
                expected: PutStatus | None) -> None:
    assert quorum_status(progress, expired=expired, stopping=stopping) is expected


def test_a_put_ok_reached_while_deposed_is_not_acknowledged() -> None:
    assert answer(PutStatus.PUT_OK, fenced=True) is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert answer(PutStatus.PUT_OK, fenced=False) is PutStatus.PUT_OK
    assert answer(PutStatus.SLAVE_NOT_AVAILABLE, fenced=True) is PutStatus.SLAVE_NOT_AVAILABLE
