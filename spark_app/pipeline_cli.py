"""Argument handling shared by the spark_app pipelines.

Every pipeline parses its command line into rocketha source/sink options here, so the flags
mean the same thing in each job:

    --brokers HOST:PORT[,...]   | --controller HOST:PORT[,...]     where the topics live
    --client-config FILE        a client.properties (its controllerAddr when neither flag is
                                given; its TLS settings and keys): the option clientConfig
    --topics a,b                | --topic-pattern REGEX            what to read
    --trigger available-now | once | processing:<N>s                how often (streaming jobs)
    --credentials-file FILE                                         accessKey=/secretKey= (0600)
    --option key=value (repeatable)                                 any other connector option
                                (never secretKey: a command line is visible to every user)
    --storage-option key=value (repeatable)                         fsspec/delta-rs storage options

Misuse raises `UsageError` naming the flag; `run_pipeline` turns it into exit status 2 and one
line on stderr (argparse's own convention). Any other failure propagates: status 1 and its
traceback, which is what a Spark operator needs to see.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence

__all__ = [
    "FILTER_PUSHDOWN_CONF",
    "UsageError",
    "add_credentials_argument",
    "add_source_arguments",
    "credential_options",
    "key_value",
    "parse_trigger",
    "run_pipeline",
    "source_options",
    "where_options",
]

_PROCESSING_TIME = re.compile(r"^(?:processing:)?(\d+(?:\.\d+)?)\s*(ms|s|m)$")
_UNIT_WORDS = {"ms": "milliseconds", "s": "seconds", "m": "minutes"}


# Spark's switch for Python sources' pushFilters (off by default in Spark 4.2): batch reads
# then skip queues, tags, offset and time ranges the query's filters rule out.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


class UsageError(ValueError):
    """A pipeline was called wrongly; the message names the flag."""


def key_value(text: str) -> tuple[str, str]:
    """argparse type for `key=value` flags."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def parse_trigger(text: str) -> dict[str, object]:
    """`--trigger` value -> keyword arguments of `DataStreamWriter.trigger`."""
    value = text.strip().lower()
    if value in ("available-now", "availablenow"):
        return {"availableNow": True}
    if value == "once":
        return {"once": True}
    match = _PROCESSING_TIME.match(value)
    if match is None:
        raise UsageError(f"--trigger: expected available-now, once or processing:<N>s|ms|m, "
                         f"got {text!r}")
    return {"processingTime": f"{match.group(1)} {_UNIT_WORDS[match.group(2)]}"}


def add_source_arguments(parser: argparse.ArgumentParser, *, streaming: bool) -> None:
    """The flags that choose a rocketha source (shared by ingest_to_table and backfill)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--brokers", help="broker endpoints HOST:PORT[,HOST:PORT...]")
    where.add_argument("--controller", help="controller endpoints (routes from the name service)")
    parser.add_argument("--client-config", metavar="FILE",
                        help="client.properties (rocketha-cluster writes <dir>/client.properties)"
                        ": addresses when --brokers/--controller are not given, TLS settings, "
                        "the user's keys")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--topics", help="comma-separated topic names")
    what.add_argument("--topic-pattern", help="regex; topics created later are picked up")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="earliest | latest | JSON per queue (default earliest)")
    parser.add_argument("--tag-filter", help="RocketMQ tag expression, e.g. 'TagA || TagB'")
    parser.add_argument("--fail-on-data-loss", choices=("true", "false"), default="true")
    if streaming:
        parser.add_argument("--max-offsets-per-trigger", type=int,
                            help="cap on messages per micro-batch")
        parser.add_argument("--group-id",
                            help="commit progress as this consumer group (lag in rocketha-admin)")
    parser.add_argument("--option", action="append", type=key_value, default=[],
                        metavar="KEY=VALUE", help="any other rocketha connector option")
    add_credentials_argument(parser)


def add_credentials_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--credentials-file", metavar="FILE",
                        help="the user's keys (accessKey= and secretKey= lines, mode 0600) "
                             "for a cluster with authentication on")


def credential_options(args: argparse.Namespace) -> dict[str, str]:
    """--credentials-file as the connector's credentialsFile option; a secret given with
    --option is refused (ps shows every command line)."""
    for key, _ in args.option:
        if key.strip().lower() in ("secretkey", "tiers3secretaccesskey"):
            raise UsageError(f"--option {key}: a secret on the command line is visible to "
                             "every user; use --credentials-file")
    path = getattr(args, "credentials_file", None)
    return {"credentialsFile": path} if path else {}


def where_options(args: argparse.Namespace) -> dict[str, str]:
    """--brokers / --controller / --client-config as connector options."""
    if not (args.brokers or args.controller or args.client_config):
        raise UsageError("one of --brokers, --controller or --client-config is required")
    options: dict[str, str] = {}
    if args.brokers:
        options["brokers"] = args.brokers
    elif args.controller:
        options["controller"] = args.controller
    if args.client_config:
        options["clientConfig"] = args.client_config
    return options


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The parsed source flags as `format("rocketha")` options (all values strings)."""
    options = where_options(args)
    if args.topics:
        topics = [name.strip() for name in args.topics.split(",") if name.strip()]
        if not topics:
            raise UsageError("--topics: no topic named")
        options["subscribe"] = ",".join(topics)
    else:
        try:
            re.compile(args.topic_pattern)
        except re.error as exc:
            raise UsageError(f"--topic-pattern: not a regex ({exc})") from None
        options["subscribePattern"] = args.topic_pattern
    starting = args.starting_offsets.strip()
    if starting not in ("earliest", "latest"):
        try:
            json.loads(starting)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--starting-offsets: not earliest, latest or JSON ({exc})") from None
    options["startingOffsets"] = starting
    options["failOnDataLoss"] = args.fail_on_data_loss
    if args.tag_filter:
        options["tagFilter"] = args.tag_filter
    max_offsets = getattr(args, "max_offsets_per_trigger", None)
    if max_offsets is not None:
        if max_offsets <= 0:
            raise UsageError(f"--max-offsets-per-trigger: must be > 0, got {max_offsets}")
        options["maxOffsetsPerTrigger"] = str(max_offsets)
    group_id = getattr(args, "group_id", None)
    if group_id:
        options["groupId"] = group_id
    options.update(credential_options(args))
    for key, value in args.option:
        options[key] = value
    return options


def run_pipeline(name: str, body: Callable[[Sequence[str] | None], int],
                 argv: Sequence[str] | None = None) -> int:
    """Run a pipeline's body; misuse exits 2, failure exits 1, each with one clear line."""
    try:
        return body(argv)
    except UsageError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
