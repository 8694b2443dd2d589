"""Minimise a failing seed of the cluster simulation: the seed stays, the faults shrink.

    python3 build.py sim --cluster --seed S --minimise [--minimise-runs-max N] [run options]

A failing seed fails with some kind of invariant violation (SimFailure.kind, one of
cluster_sim.VIOLATIONS) after some injected faults (partitions, crashes, fsync failures, each
with its ordinal: 1, 2, ... in the order drawn) amid per-message noise (drops, duplicates,
long delays) and torn writes. This search looks for a smaller run of the same seed that fails
with the same kind, trying in turn:
1. a shorter fault phase (`--duration-ms`): a run is the same up to its heal, so a failure at
   t ms during the fault phase fails the same with the faults stopped at t + 1 ms (one run to
   confirm it); a failure after the heal tries half the duration while that fails;
2. no noise (`--no-noise`), then no torn writes or flipped bits (`--no-torn-writes`);
3. fewer faults (`--only-faults 3,7`): no fault at all, then delta debugging (tests/sim/
   ddmin.py) over the ordinals of the faults injected before the failure;
and again from 1 until a round changes nothing, every run counted against
`--minimise-runs-max` (RUNS_MAX: at most that many runs; the smallest failing run found so far
is the answer when it ends the search, and the report says so).

Leaving a fault out changes the run from there on (its heal, its restart, the draws after it),
so a kept ordinal may name another fault than in the seed's own run; what the search keeps is
a set of options that fails, and it replays exactly: the report prints them as a replay
command, with the minimised run's fault list and its full trace (short: few faults, and the
run stops at the failure).
"""

from __future__ import annotations

import dataclasses
import json
import sys

from tests.sim.cluster_sim import (
    ClusterOptions,
    SimFailure,
    build_parser,
    check_transit_max_ms,
    format_ordinals,
    run_options,
)
from tests.sim.ddmin import ddmin

__all__ = ["RUNS_MAX", "Minimised", "main", "minimise"]

RUNS_MAX = 200  # runs one minimisation may take (--minimise-runs-max): 0.1-1 s each
DURATION_MIN_MS = 200  # halving the fault phase stops here (the first fault comes at 200 ms)


@dataclasses.dataclass(frozen=True, slots=True)
class Minimised:
    """What a minimisation found: the seed's own failure and the smallest failing run."""

    original_options: ClusterOptions
    original: SimFailure
    options: ClusterOptions  # the smallest run that fails with the same kind
    failure: SimFailure
    runs: int  # runs taken (the seed's own run included)
    runs_max: int
    complete: bool  # False: the run limit ended the search first


class _RunsSpent(Exception):
    """The search reached its run limit (internal: minimise returns what it has)."""


class _Search:
    """The runs of one minimisation: each counted, cached, and the smallest failure kept."""

    def __init__(self, seed_options: ClusterOptions, original: SimFailure, runs_max: int
                 ) -> None:
        self.seed_options = seed_options
        self.kind = original.kind
        self.runs_max = runs_max
        self.runs = 1  # the seed's own run
        self.tried: dict[ClusterOptions, SimFailure | None] = {}

    def variant(self, current: ClusterOptions, *, only_faults: frozenset[int] | None = None,
                noise: bool | None = None, torn_writes: bool | None = None,
                duration_ms: int | None = None) -> ClusterOptions:
        """`current` with one knob changed (from the seed's options: see smaller())."""
        smaller = self.seed_options.smaller(
            only_faults=current.only_faults if only_faults is None else only_faults,
            noise=current.noise if noise is None else noise,
            torn_writes=current.torn_writes if torn_writes is None else torn_writes)
        return dataclasses.replace(smaller, duration_ms=duration_ms or current.duration_ms)

    def fails(self, options: ClusterOptions) -> SimFailure | None:
        """The failure of a run with `options` if it is of the kind sought, else None."""
        if options in self.tried:
            return self.tried[options]
        if self.runs >= self.runs_max:
            raise _RunsSpent
        self.runs += 1
        found = None
        try:
            run_options(options)
        except SimFailure as failure:
            found = failure if failure.kind == self.kind else None
        self.tried[options] = found
        return found


def minimise(options: ClusterOptions, *, runs_max: int = RUNS_MAX) -> Minimised | None:
    """Minimise the run `options` (a seed's own: no knob turned yet); None if it passes."""
    assert options.only_faults is None and options.noise and options.torn_writes, options
    assert runs_max >= 1, runs_max
    try:
        run_options(options)
        return None
    except SimFailure as failure:
        original = failure
    search = _Search(options, original, runs_max)
    best = (options, original)
    complete = True
    try:
        changed = True
        while changed:
            before = best
            best = _shorten(search, *best)
            best = _switch_off(search, *best)
            best = _fewer_faults(search, *best)
            changed = best[0] != before[0]
    except _RunsSpent:
        complete = False
        best = _smallest(search, best)
    return Minimised(options, original, best[0], best[1], search.runs, runs_max, complete)


def _size(entry: tuple[ClusterOptions, SimFailure]) -> tuple[int, int, int, int]:
    options, failure = entry
    return (len(failure.faults), options.noise, options.torn_writes, options.duration_ms)


def _smallest(search: _Search, best: tuple[ClusterOptions, SimFailure]
              ) -> tuple[ClusterOptions, SimFailure]:
    """The smallest failing run tried (the run limit stopped the steps midway)."""
    failing = [(options, failure) for options, failure in search.tried.items()
               if failure is not None]
    return min([best, *failing], key=_size)


def _shorten(search: _Search, options: ClusterOptions, failure: SimFailure
             ) -> tuple[ClusterOptions, SimFailure]:
    """The fault phase ended just after the failure (or halved while the run still fails)."""
    if failure.at_ms < options.duration_ms:
        shorter = search.variant(options, duration_ms=failure.at_ms + 1)
        found = search.fails(shorter)
        # the same run up to the heal: it must fail the same (a check of the simulator)
        assert found is not None and found.at_ms == failure.at_ms, (shorter, found)
        return shorter, found
    while options.duration_ms // 2 >= DURATION_MIN_MS:
        shorter = search.variant(options, duration_ms=options.duration_ms // 2)
        found = search.fails(shorter)
        if found is None:
            break
        options, failure = shorter, found
    return options, failure


def _switch_off(search: _Search, options: ClusterOptions, failure: SimFailure
                ) -> tuple[ClusterOptions, SimFailure]:
    """Noise off, then torn writes off, each kept if the run still fails."""
    for knob in ("noise", "torn_writes"):
        if getattr(options, knob):
            quieter = search.variant(options, **{knob: False})
            found = search.fails(quieter)
            if found is not None:
                options, failure = _shorten(search, quieter, found)
    return options, failure


def _fewer_faults(search: _Search, options: ClusterOptions, failure: SimFailure
                  ) -> tuple[ClusterOptions, SimFailure]:
    """No fault at all, else a 1-minimal set of the faults injected (ddmin)."""
    ordinals = [fault.ordinal for fault in failure.faults]
    if not ordinals:
        return options, failure
    best = [options, failure]

    def test(kept: list[int]) -> list[int] | None:
        candidate = search.variant(options, only_faults=frozenset(kept))
        found = search.fails(candidate)
        if found is None:
            return None
        best[:] = [candidate, found]  # a subset of the last one that failed (ddmin's)
        return [fault.ordinal for fault in found.faults]

    if test([]) is None:
        ddmin(ordinals, test)
    kept_options, kept_failure = best
    return _shorten(search, kept_options, kept_failure)


def report(found: Minimised) -> list[str]:
    """The lines printed: the seed's failure, what was left, the replay command."""
    original, failure, options = found.original, found.failure, found.options
    limit = "" if found.complete else ": reached, so smaller but maybe not 1-minimal"
    changes = ", ".join((
        f"{len(original.faults)} faults -> {len(failure.faults)}",
        f"noise {'kept' if options.noise else 'off'}",
        f"torn writes {'kept' if options.torn_writes else 'off'}",
        f"{found.original_options.duration_ms} -> {options.duration_ms} ms of faults"))
    return [
        (f"seed {options.seed} fails ({original.kind}) after {len(original.faults)} faults in "
         f"{found.original_options.duration_ms} ms of faults: {headline(original)}"),
        f"minimised in {found.runs} runs (limit {found.runs_max}{limit}): {changes}",
        "the faults left:" if failure.faults else "no fault left",
        *(f"  fault {fault.ordinal} at {fault.at_ms} ms: {fault.what}"
          for fault in failure.faults),
        f"replay: {options.replay_command()}",
    ]


def headline(failure: SimFailure) -> str:
    """The failure's first line, without its "seed S: " (the report names the seed)."""
    return str(failure).splitlines()[0].split(": ", 1)[-1]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("build.py sim --cluster --minimise")
    parser.add_argument("--minimise", action="store_true", required=True,
                        help="search a smaller run of --seed that fails the same way")
    parser.add_argument("--minimise-runs-max", type=int, default=RUNS_MAX,
                        help=f"runs the search may take (default {RUNS_MAX})")
    args = parser.parse_args(argv)
    if args.seed is None:
        parser.error("--minimise takes one --seed")
    if args.only_faults is not None or args.no_noise or args.no_torn_writes:
        parser.error("--minimise starts from the seed's own run: without --only-faults, "
                     "--no-noise, --no-torn-writes")
    if args.minimise_runs_max < 1:
        parser.error("--minimise-runs-max must be at least 1")
    check_transit_max_ms(parser, args)
    options = ClusterOptions.from_seed(args.seed, args.duration_ms, args.quorum,
                                       partial=args.partial, disk=args.disk, sets=args.sets,
                                       replicas=args.replicas,
                                       transit_max_ms=args.transit_max_ms,
                                       long_delay_max_ms=args.long_delay_max_ms,
                                       check_lease=args.check_lease)
    found = minimise(options, runs_max=args.minimise_runs_max)
    if found is None:
        print(f"seed {args.seed} passes: nothing to minimise")
        if args.json:
            print(json.dumps({"seed": args.seed, "failed": False}))
        return 0
    print("\n".join(report(found)))
    print("its trace:")
    try:
        run_options(found.options, trace=True)
        print("the run passed this time: the replay is not exact (a simulator bug)")
    except SimFailure as failure:
        print(headline(failure))
    if args.json:
        print(json.dumps({
            "seed": args.seed, "failed": True, "kind": found.original.kind,
            "faults": len(found.original.faults), "faults_minimised": len(found.failure.faults),
            "only_faults": format_ordinals(fault.ordinal for fault in found.failure.faults),
            "noise": found.options.noise, "torn_writes": found.options.torn_writes,
            "duration_ms": found.options.duration_ms, "runs": found.runs,
            "complete": found.complete, "replay": found.options.replay_command()}))
    return 1


if __name__ == "__main__":
    sys.exit(main())
