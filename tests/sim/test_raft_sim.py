"""Deterministic simulation of Raft clusters: many seeds, every invariant checked after each step.

Goal: election safety, log matching, leader completeness, state-machine safety, linearizable
ReadIndex reads and liveness after healing hold under drops, delays, duplicates, partitions,
clock drift and crashes that lose unsynced state. Method: `tests/sim/raft_sim.py` runs 200
seeds by default (more with `python3 build.py sim --seeds N`); the checker itself is tested by
breaking the core on purpose (monkeypatched known bugs) and requiring the simulator to notice.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.raft import RaftLog, RaftNode, Role
from tests.sim.raft_sim import SimFailure, main, run_seed

SEEDS_DEFAULT = 200
TICKS_DEFAULT = 200
CHUNK = 25


@pytest.mark.parametrize("first", range(1, SEEDS_DEFAULT + 1, CHUNK))
def test_seeds_hold_every_invariant(first: int) -> None:
    failures = []
    for seed in range(first, first + CHUNK):
        try:
            run_seed(seed, TICKS_DEFAULT)
        except SimFailure as failure:
            failures.append(str(failure))
    assert not failures, "\n".join(failures)


def test_a_seed_replays_identically() -> None:
    assert run_seed(7, 150) == run_seed(7, 150)
    assert run_seed(7, 150) != run_seed(8, 150)


def test_the_runs_exercise_the_faults_they_claim() -> None:
    stats = [run_seed(seed, TICKS_DEFAULT) for seed in range(1, 26)]
    assert sum(s.crashes for s in stats) > 50
    assert sum(s.snapshots_sent for s in stats) > 10
    assert sum(s.reads for s in stats) > 100
    assert sum(s.elections for s in stats) > len(stats)
    assert {s.size for s in stats} == {1, 3, 5}


def _always_up_to_date(self: RaftLog, last_index: int, last_term: int) -> bool:
    return True


def _reads_without_confirmation(self: RaftNode) -> None:
    if self.role is not Role.LEADER:
        return
    # as if every peer had confirmed every round: no majority really vouches for the leader
    self._read_states += self._reads.release(
        committed_index=self.log.committed_index, term_committed=True,
        peer_read_seqs_acked=[self._reads.read_seq] * len(self.config.peer_ids),
        quorum_size=self.config.quorum_size)


@pytest.mark.parametrize(
    ("target", "name", "broken", "expected"),
    [
        (RaftLog, "is_up_to_date", _always_up_to_date, "leader completeness"),
        (RaftNode, "_release_reads", _reads_without_confirmation, "stale read"),
    ],
)
def test_the_checker_catches_a_broken_core(
    monkeypatch: pytest.MonkeyPatch, target: type, name: str, broken: Callable[..., object],
    expected: str,
) -> None:
    monkeypatch.setattr(target, name, broken)
    for seed in range(1, 61):
        try:
            run_seed(seed, TICKS_DEFAULT)
        except SimFailure as failure:
            assert expected in str(failure)
            assert f"build.py sim --seed {seed}" in str(failure)
            return
    pytest.fail(f"no seed noticed the broken {target.__name__}.{name}")


def test_the_runner_reports_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "3", "--first-seed", "11", "--ticks", "100"]) == 0
    assert "3/3 seeds passed" in capsys.readouterr().out


@pytest.mark.slow
def test_a_long_search() -> None:
    assert main(["--seeds", "2000", "--first-seed", "1000", "--ticks", "400"]) == 0
