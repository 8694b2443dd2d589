"""Minimising a failing seed of the cluster simulation (tests/sim/cluster_minimise.py).

Goal: a failing seed shrinks to a run with fewer faults that still breaks the same invariant,
and the replay command printed for it fails the same way; the options that leave faults out
change nothing when not given (the suite's seeds replay as before). Method: a broken quorum
count (the master's own copy counts as every replica, as in test_cluster_sim.py) makes seeds
lose PUT_OKs; the minimiser runs in-process on one of them, and the printed command is parsed
and replayed with the simulator's own parser.
"""

from __future__ import annotations

import argparse
import json
import shlex

import pytest

import ha.replication.master_quorum
from tests.sim import cluster_minimise
from tests.sim.cluster_sim import (
    ClusterOptions,
    SimFailure,
    build_parser,
    parse_ordinals,
    run_options,
    run_seed,
)
from tests.sim.ddmin import ddmin, split

DURATION_MS = 3000


def test_ddmin_finds_a_one_minimal_subset() -> None:
    needed = {3, 11, 17}
    tested: set[tuple[int, ...]] = set()

    def test(candidate: list[int]) -> list[int] | None:
        tested.add(tuple(candidate))
        return candidate if needed <= set(candidate) else None
    assert ddmin(list(range(1, 21)), test) == [3, 11, 17]
    assert len(tested) < 60  # distinct candidates (the cluster search runs each once)
    # the test may answer with fewer items than it was given (a run that fails earlier)
    assert ddmin(list(range(1, 21)), lambda c: [x for x in c if x in needed]
                 if needed <= set(c) else None) == [3, 11, 17]
    assert ddmin([5], test) == [5]
    assert split([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4, 5]]


def test_the_minimising_options_change_nothing_when_not_given() -> None:
    # every fault kept, noise and torn writes on: the seed's own run, step for step
    assert run_seed(7, 2000) == run_seed(7, 2000, only_faults=range(1, 1000))
    seed_options = ClusterOptions.from_seed(7, 2000)
    quiet = ClusterOptions.from_seed(7, 2000, noise=False, torn_writes=False)
    assert quiet.drop_probability == quiet.torn_write_probability == 0.0
    assert (quiet.partition_probability, quiet.crash_probability, quiet.put_period_ms) == (
        seed_options.partition_probability, seed_options.crash_probability,
        seed_options.put_period_ms)
    # no fault at all: no partition, no crash, no failed fsync (an engine seed that has one)
    assert run_seed(18, DURATION_MS, disk="engine")["fsync_failures"] == 1
    none = run_seed(18, DURATION_MS, disk="engine", only_faults=())
    assert (none["crashes"], none["partitions"], none["fsync_failures"]) == (0, 0, 0)


def test_only_faults_takes_ordinals() -> None:
    assert parse_ordinals("3,7") == {3, 7} and parse_ordinals("none") == frozenset()
    for bad in ("x", "0", "", "3,-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="--only-faults"):
            parse_ordinals(bad)


@pytest.fixture
def master_acks_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken quorum count: the master's own copy counts as every replica."""
    monkeypatch.setattr(ha.replication.master_quorum, "holders",
                        lambda log_position, master_position, acks: 3 * (
                            master_position >= log_position))


def first_failing_seed(faults_min: int, transit_max_ms: int = 0
                       ) -> tuple[ClusterOptions, SimFailure]:
    """The first seed of 1-40 that loses a PUT_OK after at least `faults_min` faults."""
    for seed in range(1, 41):
        options = ClusterOptions.from_seed(seed, DURATION_MS, transit_max_ms=transit_max_ms)
        try:
            run_options(options)
        except SimFailure as failure:
            if failure.kind == "ack-lost" and len(failure.faults) >= faults_min:
                return options, failure
    raise AssertionError("a master acking alone lost no PUT_OK in 40 seeds")


def replay(command: str) -> ClusterOptions:
    """The options a printed replay command names, through the simulator's own parser."""
    words = shlex.split(command)
    assert words[:4] == ["python3", "build.py", "sim", "--cluster"], words
    args = build_parser().parse_args(words[4:])
    return ClusterOptions.from_seed(args.seed, args.duration_ms, args.quorum,
                                    partial=args.partial, disk=args.disk, sets=args.sets,
                                    replicas=args.replicas, only_faults=args.only_faults,
                                    noise=not args.no_noise,
                                    torn_writes=not args.no_torn_writes,
                                    transit_max_ms=args.transit_max_ms,
                                    long_delay_max_ms=args.long_delay_max_ms,
                                    check_lease=args.check_lease)


@pytest.mark.usefixtures("master_acks_alone")
def test_a_failing_seed_shrinks_to_fewer_faults_that_fail_the_same_way() -> None:
    options, original = first_failing_seed(faults_min=3)
    found = cluster_minimise.minimise(options)
    assert found is not None and found.complete
    assert found.original.kind == found.failure.kind == "ack-lost"
    assert str(found.original) == str(original)
    assert len(found.failure.faults) < len(original.faults)
    assert found.runs <= cluster_minimise.RUNS_MAX
    # the printed command replays the minimised run exactly
    lines = cluster_minimise.report(found)
    command = next(line for line in lines if line.startswith("replay: "))[len("replay: "):]
    assert replay(command) == found.options
    with pytest.raises(SimFailure) as replayed:
        run_options(replay(command))
    assert replayed.value.kind == "ack-lost"
    assert (replayed.value.at_ms, replayed.value.faults) == (found.failure.at_ms,
                                                             found.failure.faults)
    assert str(replayed.value) == str(found.failure)
    # and the seed with no option still fails as it did
    with pytest.raises(SimFailure) as again:
        run_options(options)
    assert str(again.value) == str(original)


@pytest.mark.usefixtures("master_acks_alone")
def test_the_run_limit_ends_the_search_with_the_smallest_failure_so_far() -> None:
    options, original = first_failing_seed(faults_min=3)
    found = cluster_minimise.minimise(options, runs_max=3)
    assert found is not None and not found.complete and found.runs == 3
    assert found.failure.kind == original.kind
    assert len(found.failure.faults) <= len(original.faults)
    assert "maybe not 1-minimal" in cluster_minimise.report(found)[1]


@pytest.mark.usefixtures("master_acks_alone")
def test_the_command_prints_the_minimised_faults_replay_and_trace(
        capsys: pytest.CaptureFixture[str]) -> None:
    _, original = first_failing_seed(faults_min=3)
    # the failure names the command that minimises it
    hint = str(original).splitlines()[-1].strip()
    assert hint.startswith("minimise: python3 build.py sim --cluster --seed "), hint
    words = shlex.split(hint.removeprefix("minimise: "))
    assert cluster_minimise.main([*words[4:], "--json"]) == 1
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["kind"] == "ack-lost" and summary["faults"] == len(original.faults)
    assert summary["faults_minimised"] < summary["faults"]
    assert f"replay: {summary['replay']}" in out
    trace = out.split("its trace:\n", 1)[1]
    assert "ACKNOWLEDGED MESSAGE LOST" in trace
    kept = [f"fault {n}: " for n in parse_ordinals(summary["only_faults"])]
    assert all(fault in trace for fault in kept)  # the faults left are in the trace


def test_a_passing_seed_has_nothing_to_minimise(capsys: pytest.CaptureFixture[str]) -> None:
    assert cluster_minimise.main(["--seed", "7", "--duration-ms", "1000", "--minimise"]) == 0
    assert "seed 7 passes: nothing to minimise" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # a search starts from the seed's own run
        cluster_minimise.main(["--seed", "7", "--minimise", "--no-noise"])


@pytest.mark.usefixtures("master_acks_alone")
def test_a_minimised_run_keeps_the_heartbeat_transit_option() -> None:
    # --heartbeat-transit-max-ms is not a fault: every smaller run keeps it, and so does the
    # replay command printed (the minimise hint too)
    options, original = first_failing_seed(faults_min=2, transit_max_ms=100)
    assert "--heartbeat-transit-max-ms 100 --minimise" in str(original)
    found = cluster_minimise.minimise(options)
    assert found is not None and found.options.transit_max_ms == 100
    command = next(line for line in cluster_minimise.report(found)
                   if line.startswith("replay: "))[len("replay: "):]
    assert "--heartbeat-transit-max-ms 100" in command
    with pytest.raises(SimFailure) as replayed:
        run_options(replay(command))
    assert str(replayed.value) == str(found.failure)
