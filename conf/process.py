"""The start-up every server process shares (`rocketha-broker`, `rocketha-controller`), before
it opens anything of its own.

In order (`start_server`), each refusal one line on standard error and exit status 2, never a
traceback:

  1. faulthandler on: a crash in native code (gRPC, Arrow) leaves its stacks in the log;
  2. refuse `python -O`: asserts guard invariants (STYLE 3.5), and -O strips them;
  3. `--conf FILE` / `--example-conf` (the commented example from conf/ in a checkout, from
     `<prefix>/share/rocketha/conf/` in a wheel, so an operator starts from a complete file);
  4. the properties file, through the process's own loader (an unknown key or a bad value
     names the key);
  5. secure by default: the config's `plaintext_refusal()` (conf/tls.py, README "Transport
     security") stops a process that would listen beyond loopback without TLS and
     authentication;
  6. logging as configured (logFile rotated by size, or standard error).

What follows (opening the store or the Raft log, serving, signals, shutdown) is each process's
own: ha/broker/main.py, controller/main.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import logging
import logging.handlers
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Protocol, TypeVar

__all__ = ["BROKER_PROGRAM", "CONTROLLER_PROGRAM", "EXIT_REFUSED", "LOG_FORMAT", "PROXY_PROGRAM",
           "Program", "ServerConfig", "Started", "configure_logging", "print_example_conf",
           "refuse", "server_parser", "start_server"]

EXIT_REFUSED = 2  # the exit status of a process that refused to start (or to go on)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ServerConfig(Protocol):
    """What start-up reads from a process's config object."""

    @property
    def log_file(self) -> str: ...
    @property
    def log_file_bytes_max(self) -> int: ...
    @property
    def log_files_kept(self) -> int: ...
    def plaintext_refusal(self) -> str | None: ...


ConfigT = TypeVar("ConfigT", bound=ServerConfig)


@dataclasses.dataclass(frozen=True, slots=True)
class Program:
    name: str  # "rocketha-broker": argparse's prog and the prefix of every refusal
    description: str  # the --help line
    conf_name: str  # the example's file name in conf/ ("broker.conf")
    conf_help: str  # --conf's help ("broker properties file (key=value)")


# Here, not beside each process's main: the console-script shims (ha/broker_entry.py, ...)
# answer `--help` with server_parser(program) before importing the process, which is slow.
BROKER_PROGRAM = Program(
    "rocketha-broker", "Run one broker (a message store served over Arrow Flight) until "
    "SIGTERM/SIGINT.", "broker.conf", "broker properties file (key=value)")
CONTROLLER_PROGRAM = Program(
    "rocketha-controller", "Run one controller (Raft over replica-set metadata) until "
    "SIGTERM/SIGINT.", "controller.conf", "controller properties file (key=value)")
PROXY_PROGRAM = Program(
    "rocketha-proxy", "Serve RocketMQ 5's gRPC MessagingService on a rocketha cluster.",
    "proxy.conf", "proxy properties file (key=value)")


def server_parser(program: Program) -> argparse.ArgumentParser:
    """`--conf FILE` and `--example-conf`: a server's whole command line (argparse only)."""
    parser = argparse.ArgumentParser(prog=program.name, description=program.description)
    parser.add_argument("--conf", help=program.conf_help)
    parser.add_argument("--example-conf", action="store_true",
                        help=f"print the commented example {program.conf_name} and exit")
    return parser


@dataclasses.dataclass(frozen=True, slots=True)
class Started(Generic[ConfigT]):
    config: ConfigT
    conf_path: str  # --conf, for the messages of the process's own later refusals


def refuse(program_name: str, message: str) -> int:
    """Say why on standard error (logging may not be set up yet); the exit status."""
    print(f"{program_name}: {message}", file=sys.stderr)  # noqa: T201 - before logging is set up
    return EXIT_REFUSED


def start_server(program: Program, argv: list[str] | None, load: Callable[[str], ConfigT],
                 config_errors: tuple[type[Exception], ...]) -> Started[ConfigT] | int:
    """Steps 1 to 6 of the module docstring.

    Args:
        load: reads the properties file into the process's config (`from_file`).
        config_errors: what `load` raises for a bad file (OSError is caught too).

    Returns:
        The config and its path, or the exit status when the process ends here (0 after
        `--example-conf`, EXIT_REFUSED after a refusal, already explained on standard error).
    """
    faulthandler.enable()
    if not __debug__:
        return refuse(program.name, "refusing to run with python -O (asserts guard invariants)")
    parser = server_parser(program)
    args = parser.parse_args(argv)
    if args.example_conf:
        return print_example_conf(program)
    if args.conf is None:
        parser.error("--conf is required (--example-conf prints a commented example)")
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    refused: tuple[type[Exception], ...] = (*config_errors, OSError)
    try:
        config = load(args.conf)
    except refused as err:
        return refuse(program.name, f"bad configuration in {args.conf}: {err}")
    refusal = config.plaintext_refusal()
    if refusal is not None:  # secure by default (README "Transport security")
        return refuse(program.name, f"refusing to start: {refusal}")
    try:
        configure_logging(config.log_file, config.log_file_bytes_max, config.log_files_kept)
    except OSError as err:
        return refuse(program.name, f"logFile {config.log_file}: {err}")
    return Started(config, args.conf)


def print_example_conf(program: Program) -> int:
    """The example file: from the checkout's conf/, else from the wheel's data files."""
    candidates = (Path(__file__).resolve().parent / program.conf_name,
                  Path(sys.prefix) / "share" / "rocketha" / "conf" / program.conf_name)
    for candidate in candidates:
        if candidate.is_file():
            sys.stdout.write(candidate.read_text())
            return 0
    return refuse(program.name, f"no example {program.conf_name} in "
                  f"{[str(c) for c in candidates]}")


def configure_logging(log_file: str, bytes_max: int, kept: int) -> None:
    """Standard error, or `log_file` rotated by size (logFile, logFileBytesMax, logFilesKept)."""
    handler: logging.Handler = (logging.handlers.RotatingFileHandler(
        log_file, maxBytes=bytes_max, backupCount=kept, encoding="utf-8")
        if log_file else logging.StreamHandler())
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
