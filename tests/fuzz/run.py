"""Run one fuzz target of tests/fuzz/targets.py under atheris (libFuzzer, coverage-guided).

    python tests/fuzz/run.py TARGET --seconds N [--corpus DIR]

Our packages are instrumented for coverage; the corpus (default `.fuzz/<TARGET>/`, not in git)
grows across runs and starts from a few well-formed seeds. A finding stops the run with the
Python traceback and a `crash-<sha1>` file holding the input (replay: pass the file instead of
--seconds). On success the last line is `fuzz TARGET: N executions in S s, no finding`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

with atheris.instrument_imports(include=["storage_engine", "ha", "controller", "connector",
                                         "conf"]):
    from tests.fuzz.seeds import seeds
    from tests.fuzz.targets import TARGETS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("replay", nargs="*", help="crash files to replay instead of fuzzing")
    args = parser.parse_args()
    target = TARGETS[args.target]
    if args.replay:
        for path in args.replay:
            target(Path(path).read_bytes())
        print(f"replayed {len(args.replay)} input(s): no finding")
        return 0
    corpus = args.corpus or ROOT / ".fuzz" / args.target
    corpus.mkdir(parents=True, exist_ok=True)
    for index, seed in enumerate(seeds(args.target)):
        (corpus / f"seed-{index}").write_bytes(seed)
    libfuzzer_args = [sys.argv[0], str(corpus), f"-max_total_time={args.seconds}",
                      "-print_final_stats=1", "-rss_limit_mb=4096", "-timeout=20",
                      f"-artifact_prefix={ROOT / '.fuzz'}/{args.target}-"]
    atheris.Setup(libfuzzer_args, target)
    atheris.Fuzz()  # exits the process itself (final stats on stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
