"""The command-line vocabulary every rocketha tool shares, and its deprecated spellings.

One word, one meaning across the tools:

- `--replica-sets N` counts replica sets (`rocketha-cluster up`, `plan`); `--broker HOST:PORT`
  and `brokerAddr` are addresses; `--broker-name NAME` names one replica set.
- A topic is always `--topic T`, a replica set always `--broker-name NAME`: options, never
  positionals (the data commands used options and the controller commands positionals).
  Options are order-free, say what they are in a shell history, and match mqadmin's `-t`/`-b`.

An old spelling keeps working for a release and prints one line on standard error saying what
replaces it, so a script keeps running and its owner sees what to change. Nothing here imports
beyond argparse: it is on every tool's `--help` path, which must stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["DeprecatedOption", "deprecation_line", "resolve_positional_alias"]


def deprecation_line(prog: str, old: str, new: str) -> str:
    """The one line an old spelling prints (no trailing newline)."""
    return f"{prog}: {old} is deprecated and will be removed; use {new} (same meaning)"


class DeprecatedOption(argparse.Action):
    """An option spelling kept for a release: stores like `store`, then says what replaces it.

    `add_argument("--brokers", dest="replica_sets", type=int, action=DeprecatedOption,
    replacement="--replica-sets", help=argparse.SUPPRESS)`; the new option is declared
    separately with the same dest, so `--help` shows only the new one.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, *, replacement: str,
                 stream: TextIO | None = None, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.replacement = replacement
        self.stream = stream

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(deprecation_line(parser.prog, option_string or self.option_strings[0],
                               self.replacement), file=self.stream or sys.stderr)
        setattr(namespace, self.dest, values)


def resolve_positional_alias(parser: argparse.ArgumentParser, args: argparse.Namespace,
                             positional: str, option: str, *, required: bool = True,
                             stream: TextIO | None = None) -> None:
    """Fold a deprecated positional (dest `positional`) into its option (`--topic` → dest
    `topic`): the positional prints the deprecation line; both given and different, or
    neither when `required`, is a usage error (one line, exit 2)."""
    dest = option.lstrip("-").replace("-", "_")
    old, new = getattr(args, positional, None), getattr(args, dest, None)
    if old is not None:
        print(deprecation_line(parser.prog, f"the positional {dest.upper()}",
                               f"{option} {old}"), file=stream or sys.stderr)
        if new is not None and new != old:
            parser.error(f"{option} {new} and the positional {old} disagree: give {option} only")
        setattr(args, dest, old)
    elif new is None and required:
        parser.error(f"the following arguments are required: {option}")
    if hasattr(args, positional):
        delattr(args, positional)
