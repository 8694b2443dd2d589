"""Spark options (`dict[str, str]`, case-insensitive keys) -> frozen, validated option objects.

Parsed once, on the driver, from `DataSource.reader()/streamReader()/writer()/streamWriter()`;
the frozen result is what the reader/writer objects hold and Spark pickles (plain values only).
Every error names the option and the value. An option this connector does not know raises: a
typo never silently falls back to a default.

Keys are matched case-insensitively (Spark hands them over lower-cased in a CaseInsensitiveDict);
the canonical spellings are the constants below.

    where:     brokers | controller, and/or clientConfig (a client.properties: its
               controllerAddr/brokerAddr when neither option is given, its tls.client.*
               settings (the files it names must be readable on every executor), and its
               accessKey/secretKey or credentialsFile (read on the driver)
    who:       accessKey + secretKey | credentialsFile (instead of clientConfig's keys)
    what:      subscribe | subscribePattern | assign                      (exactly one)
    from/to:   startingOffsets, startingOffsetsByTimestamp, startingTimestamp (+
               startingOffsetsByTimestampStrategy), endingOffsets, endingOffsetsByTimestamp,
               endingTimestamp (the ending ones: batch reads only)
    how much:  maxOffsetsPerTrigger, minOffsetsPerTrigger + maxTriggerDelay, minPartitions,
               maxRecordsPerPartition, minRowsPerPartition
    columns:   includeProperties, includeMetadata, includeHeaders | columns (a list, *, or
               kafka: Kafka's names, with includeHeaders)   (the default schema; columns.py)
    extras:    tagFilter, failOnDataLoss, readFromReplicas, groupId | groupIdPrefix,
               fetch*/requestTimeoutMs

Durations (maxTriggerDelay, requestTimeoutMs, fetchTimeoutMs) take a bare number of
milliseconds or a number with a unit, as Spark parses `15m` (conf.values.parse_duration_ms).
A timestamp option wins over the offsets option of its end (Kafka's precedence); the two
timestamp options of one end exclude each other.
    sink:      topic, acceptStatuses, exactlyOnce, writeBatchRows, writeBatchBytes
    workers:   workerGcFreeze (source and sink; connector/spark/worker_heap.py)
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from conf import (
    read_credentials_file,
    unknown_key_message,
)
from conf.signing import Credentials
from conf.tls import (
    NO_TLS,
    ClientTLS,
    TLSConfigError,
    client_tls_from_properties,
    read_properties,
)
from connector.errors import OptionError
from connector.protocol import CODES
from connector.spark.columns import ALL_COLUMN_NAMES, COLUMN_DDL_TYPES, kafka_columns, with_extras
from connector.spark.offsets import (
    EARLIEST,
    LATEST,
    TopicOffsets,
    parse_offsets_json,
    parse_queue_key,
)
from connector.spark.option_values import (
    option_bool,
    option_choice,
    option_duration_ms,
    option_int,
    option_name,
    option_string_map,
)

__all__ = [
    "ACCEPT_STATUSES",
    "ACCESS_KEY",
    "ASSIGN",
    "BATCH_ONLY_OPTIONS",
    "BROKERS",
    "CLIENT_CONFIG",
    "COLUMNS",
    "CONTROLLER",
    "CREDENTIALS_FILE",
    "ENDING_OFFSETS",
    "ENDING_OFFSETS_BY_TIMESTAMP",
    "ENDING_TIMESTAMP",
    "EXACTLY_ONCE",
    "FAIL_ON_DATA_LOSS",
    "FETCH_MAX_BYTES",
    "FETCH_MAX_MESSAGES",
    "FETCH_TIMEOUT_MS",
    "GROUP_ID",
    "GROUP_ID_PREFIX",
    "INCLUDE_HEADERS",
    "INCLUDE_METADATA",
    "INCLUDE_PROPERTIES",
    "KAFKA_COLUMNS",
    "MAX_OFFSETS_PER_TRIGGER",
    "MAX_RECORDS_PER_PARTITION",
    "MAX_TRIGGER_DELAY",
    "MIN_OFFSETS_PER_TRIGGER",
    "MIN_PARTITIONS",
    "MIN_ROWS_PER_PARTITION",
    "READ_COLD_FROM_TIER",
    "READ_FROM_REPLICAS",
    "READ_OPTIONS",
    "REQUEST_TIMEOUT_MS",
    "SECRET_KEY",
    "STARTING_OFFSETS",
    "STARTING_OFFSETS_BY_TIMESTAMP",
    "STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY",
    "STARTING_TIMESTAMP",
    "SUBSCRIBE",
    "SUBSCRIBE_PATTERN",
    "TAG_FILTER",
    "TIER_STORAGE_OPTIONS",
    "TOPIC",
    "WORKER_GC_FREEZE",
    "WRITE_BATCH_BYTES",
    "WRITE_BATCH_ROWS",
    "WRITE_OPTIONS",
    "SinkOptions",
    "SourceOptions",
    "batch_only_options",
    "parse_sink_options",
    "parse_source_options",
]

BROKERS = "brokers"
CONTROLLER = "controller"
CLIENT_CONFIG = "clientConfig"
REQUEST_TIMEOUT_MS = "requestTimeoutMs"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribePattern"
ASSIGN = "assign"
STARTING_OFFSETS = "startingOffsets"
STARTING_OFFSETS_BY_TIMESTAMP = "startingOffsetsByTimestamp"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_OFFSETS = "endingOffsets"
ENDING_OFFSETS_BY_TIMESTAMP = "endingOffsetsByTimestamp"
ENDING_TIMESTAMP = "endingTimestamp"
# What a starting timestamp does on a queue with messages but none stored at or after it:
# "error" fails the query (Kafka's default), "latest" starts that queue at its end.
STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY = "startingOffsetsByTimestampStrategy"
STRATEGIES = ("error", "latest")
# The options a streaming read refuses (a stream has no end), as Spark's Kafka source does.
BATCH_ONLY_OPTIONS = (ENDING_OFFSETS, ENDING_OFFSETS_BY_TIMESTAMP, ENDING_TIMESTAMP)
FAIL_ON_DATA_LOSS = "failOnDataLoss"
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
MIN_OFFSETS_PER_TRIGGER = "minOffsetsPerTrigger"
MAX_TRIGGER_DELAY = "maxTriggerDelay"
MIN_PARTITIONS = "minPartitions"
# Cut queue ranges so no read task holds more (Kafka's option; turns minRowsPerPartition's
# packing off, which would put small ranges back together past it).
MAX_RECORDS_PER_PARTITION = "maxRecordsPerPartition"
# Ranges smaller than this share a read task (planning.pack_groups); 0: one task per range.
MIN_ROWS_PER_PARTITION = "minRowsPerPartition"
MIN_ROWS_PER_PARTITION_DEFAULT = 500_000
TAG_FILTER = "tagFilter"
READ_FROM_REPLICAS = "readFromReplicas"
GROUP_ID = "groupId"
# A group of its own per reader: "<prefix>-<12 hex>", for a broker ACL on "Group:<prefix>*"
GROUP_ID_PREFIX = "groupIdPrefix"
FETCH_MAX_MESSAGES = "fetchMaxMessages"
FETCH_MAX_BYTES = "fetchMaxBytes"
FETCH_TIMEOUT_MS = "fetchTimeoutMs"
READ_COLD_FROM_TIER = "readColdFromTier"
TIER_STORAGE_OPTIONS = "tierStorageOptions"
# The tier's S3 keys as options of their own: Spark's default spark.redaction.regex
# ((?i)secret|password|token|access[.]?key) hides their values in plans and the UI, which it
# cannot do for a "secret" inside tierStorageOptions' JSON.
TIER_S3_ACCESS_KEY_ID = "tierS3AccessKeyId"
TIER_S3_SECRET_ACCESS_KEY = "tierS3SecretAccessKey"
TOPIC = "topic"
# gc.freeze() in each Spark Python worker at its first task of ours (connector/spark/worker_heap.py)
WORKER_GC_FREEZE = "workerGcFreeze"
ACCEPT_STATUSES = "acceptStatuses"
EXACTLY_ONCE = "exactlyOnce"
WRITE_BATCH_ROWS = "writeBatchRows"
WRITE_BATCH_BYTES = "writeBatchBytes"
INCLUDE_PROPERTIES = "includeProperties"
INCLUDE_METADATA = "includeMetadata"
INCLUDE_HEADERS = "includeHeaders"  # Kafka's option: a headers column from the properties
COLUMNS = "columns"
KAFKA_COLUMNS = "kafka"  # columns=kafka: Kafka's column names (columns.py)
# Authentication (issue 16): the user's keys, or a file holding them (accessKey=/secretKey=
# lines, mode 0600, read on the driver). Spark's default spark.redaction.regex
# ((?i)secret|password|token|access[.]?key) redacts accessKey's and secretKey's values in
# plans, the UI and logs (tests/connector/test_auth_options.py checks the names match).
ACCESS_KEY = "accessKey"
SECRET_KEY = "secretKey"
CREDENTIALS_FILE = "credentialsFile"

_COMMON = (BROKERS, CONTROLLER, REQUEST_TIMEOUT_MS, CLIENT_CONFIG, ACCESS_KEY, SECRET_KEY,
           CREDENTIALS_FILE, WORKER_GC_FREEZE)
READ_OPTIONS = frozenset((
    *_COMMON,
    SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN, STARTING_OFFSETS, STARTING_OFFSETS_BY_TIMESTAMP,
    STARTING_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY, ENDING_OFFSETS,
    ENDING_OFFSETS_BY_TIMESTAMP, ENDING_TIMESTAMP, FAIL_ON_DATA_LOSS, MAX_OFFSETS_PER_TRIGGER,
    MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY, MIN_PARTITIONS, MAX_RECORDS_PER_PARTITION,
    MIN_ROWS_PER_PARTITION, TAG_FILTER, READ_FROM_REPLICAS, GROUP_ID, GROUP_ID_PREFIX,
    FETCH_MAX_MESSAGES, FETCH_MAX_BYTES, FETCH_TIMEOUT_MS, READ_COLD_FROM_TIER,
    TIER_STORAGE_OPTIONS, TIER_S3_ACCESS_KEY_ID, TIER_S3_SECRET_ACCESS_KEY,
    INCLUDE_PROPERTIES, INCLUDE_METADATA, INCLUDE_HEADERS, COLUMNS))
WRITE_OPTIONS = frozenset((
    *_COMMON, TOPIC, ACCEPT_STATUSES, EXACTLY_ONCE, WRITE_BATCH_ROWS, WRITE_BATCH_BYTES))
# Spark adds these itself (writeStream's checkpoint, and its queryName: DataStreamWriter
# passes both to the sink as options): accepted, unused.
_SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})

_PUT_STATUSES = frozenset(entry.name for entry in CODES.values() if entry.stored)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    """Everything a reader needs, validated. Offsets use the canonical layout (offsets.py)."""

    brokers: tuple[str, ...]
    controller: str | None
    request_timeout_ms: int
    subscribe: tuple[str, ...]
    subscribe_pattern: str | None
    assign: TopicOffsets | None  # topic -> queue key -> 0 (the keys are what matters)
    starting: str | TopicOffsets  # "earliest" | "latest" | JSON (-2 earliest, -1 latest)
    starting_by_timestamp: TopicOffsets | None  # topic -> queue key -> epoch ms
    starting_timestamp_ms: int | None
    ending: str | TopicOffsets  # "latest" | JSON (-1 latest); batch reads only
    ending_by_timestamp: TopicOffsets | None = None  # topic -> queue key -> epoch ms
    ending_timestamp_ms: int | None = None
    starting_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error | latest
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    min_rows_per_partition: int
    max_records_per_partition: int | None = None
    tag_filter: str | None
    read_from_replicas: bool
    group_id: str | None
    fetch_max_messages: int
    fetch_max_bytes: int
    fetch_timeout_ms: int
    read_cold_from_tier: bool = False
    # for executors' object reads; may hold the S3 secret: never in a repr
    tier_storage_options: tuple[tuple[str, str], ...] = dataclasses.field(default=(),
                                                                           repr=False)
    columns: tuple[str, ...] = ALL_COLUMN_NAMES  # the default schema's (columns.py)
    tls: ClientTLS = NO_TLS  # from clientConfig (file paths only: picklable, no secret)
    credentials: Credentials | None = dataclasses.field(default=None, repr=False)
    worker_gc_freeze: bool = True

    def topic_matches(self, topic: str) -> bool:
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        assert self.assign is not None
        return topic in self.assign


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SinkOptions:
    brokers: tuple[str, ...]
    controller: str | None
    request_timeout_ms: int
    topic: str | None
    accept_statuses: frozenset[str]
    exactly_once: bool
    write_batch_rows: int
    write_batch_bytes: int
    tls: ClientTLS = NO_TLS  # from clientConfig
    credentials: Credentials | None = dataclasses.field(default=None, repr=False)
    worker_gc_freeze: bool = True


def _normalize(options: Mapping[str, str], known: frozenset[str]) -> dict[str, str]:
    """Canonical key -> value; raises on an unknown key (listing the known ones)."""
    by_lower = {name.lower(): name for name in known}
    result: dict[str, str] = {}
    for raw_key, value in options.items():
        lower = str(raw_key).lower()
        if lower in _SPARK_OPTIONS:
            continue
        name = by_lower.get(lower)
        if name is None:
            raise OptionError(f"{unknown_key_message(str(raw_key), known, 'option')}; "
                              f"rocketha's options: {', '.join(sorted(known))}")
        if not isinstance(value, str):
            value = str(value)
        result[name] = value
    return result


def _client_config(values: dict[str, str]) -> tuple[ClientTLS, str | None]:
    """The clientConfig file's TLS settings, and the file that holds the user's keys (the
    client.properties itself when it has secretKey=, or the credentialsFile= it names; None:
    no keys). Its addresses fill brokers/controller in `values` when neither option names
    any."""
    path = values.get(CLIENT_CONFIG)
    if path is None:
        return NO_TLS, None
    path = path.strip()
    try:
        properties = read_properties(path)
        tls = client_tls_from_properties(properties)
    except (OSError, TLSConfigError) as err:
        raise OptionError(f"option {CLIENT_CONFIG}: {path!r}: {err}") from err
    if BROKERS not in values and CONTROLLER not in values:
        if properties.get("controllerAddr"):
            values[CONTROLLER] = properties["controllerAddr"]
        elif properties.get("brokerAddr"):
            values[BROKERS] = properties["brokerAddr"]
    keys_file = (path if properties.get("secretKey")
                 else properties.get("credentialsFile") or None)
    return tls, keys_file


def _endpoints(values: dict[str, str]) -> tuple[tuple[str, ...], str | None]:
    brokers_text, controller = values.get(BROKERS), values.get(CONTROLLER)
    if (brokers_text is None) == (controller is None):
        raise OptionError(f"exactly one of options {BROKERS} (HOST:PORT,...) and {CONTROLLER} "
                          f"is required, got {'both' if brokers_text else 'neither'}")
    if brokers_text is None:
        return (), controller
    brokers = tuple(part.strip() for part in brokers_text.split(",") if part.strip())
    if not brokers:
        raise OptionError(f"option {BROKERS}: {brokers_text!r} names no HOST:PORT")
    for endpoint in brokers:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError(f"option {BROKERS}: {endpoint!r} is not HOST:PORT")
    return brokers, None


def _tag_filter(values: dict[str, str]) -> str | None:
    text = values.get(TAG_FILTER)
    if text is None or text.strip() in ("", "*"):
        return None
    if any(not part.strip() for part in text.split("||")):
        raise OptionError(f"option {TAG_FILTER}: {text!r} has an empty tag; "
                          "use 'TagA || TagB' or '*'")
    return text


def _starting(values: dict[str, str]) -> str | TopicOffsets:
    text = values.get(STARTING_OFFSETS, "").strip()
    if not text:
        return ""  # the caller picks: earliest for batch, latest for streaming
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    return parse_offsets_json(text, STARTING_OFFSETS, low=EARLIEST)


def _ending(values: dict[str, str]) -> str | TopicOffsets:
    text = values.get(ENDING_OFFSETS, "latest").strip()
    if text.lower() == "latest":
        return "latest"
    if text.lower() == "earliest":
        raise OptionError(f"option {ENDING_OFFSETS}: 'earliest' is not allowed (an empty read); "
                          "use 'latest' or JSON")
    offsets = parse_offsets_json(text, ENDING_OFFSETS, low=LATEST)
    return offsets


def _subscription(values: dict[str, str]
                  ) -> tuple[tuple[str, ...], str | None, TopicOffsets | None]:
    given = [name for name in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN) if name in values]
    if len(given) != 1:
        raise OptionError(f"exactly one of options {SUBSCRIBE}, {SUBSCRIBE_PATTERN}, {ASSIGN} "
                          f"is required, got {given or 'none'}")
    if SUBSCRIBE in values:
        topics = tuple(option_name(SUBSCRIBE, part.strip())
                       for part in values[SUBSCRIBE].split(",") if part.strip())
        if not topics:
            raise OptionError(f"option {SUBSCRIBE}: {values[SUBSCRIBE]!r} names no topic")
        return topics, None, None
    if SUBSCRIBE_PATTERN in values:
        pattern = values[SUBSCRIBE_PATTERN]
        try:
            re.compile(pattern)
        except re.error as err:
            raise OptionError(f"option {SUBSCRIBE_PATTERN}: {pattern!r} is not a valid "
                              f"regular expression ({err})") from err
        return (), pattern, None
    return (), None, _assign(values[ASSIGN])


def _assign(text: str) -> TopicOffsets:
    """{"topic": ["broker-a:0", ...]} -> topic -> queue key -> 0."""
    try:
        value: Any = json.loads(text)
    except ValueError as err:
        raise OptionError(f"option {ASSIGN}: not valid JSON ({err}): {text[:200]!r}") from err
    if not isinstance(value, dict) or not value:
        raise OptionError(f'option {ASSIGN}: expected {{"<topic>": ["<brokerName>:<queueId>", '
                          f'...]}}, got {text[:200]!r}')
    result: TopicOffsets = {}
    for topic, keys in value.items():
        option_name(ASSIGN, topic)
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise OptionError(f"option {ASSIGN}: topic {topic!r} must map to a non-empty list of "
                              "'<brokerName>:<queueId>' strings")
        for key in keys:
            parse_queue_key(key, f"option {ASSIGN}")
        result[topic] = {key: 0 for key in sorted(set(keys))}
    return dict(sorted(result.items()))


def batch_only_options(options: Mapping[str, str]) -> list[str]:
    """The options of `options` a streaming read refuses (BATCH_ONLY_OPTIONS), canonical."""
    given = {str(key).lower() for key in options}
    return [name for name in BATCH_ONLY_OPTIONS if name.lower() in given]


def _by_timestamp(values: dict[str, str], json_option: str, single_option: str
                  ) -> tuple[TopicOffsets | None, int | None]:
    """One end's timestamps: per-queue JSON, or one for every queue (not both)."""
    by_timestamp = None
    if json_option in values:
        by_timestamp = parse_offsets_json(values[json_option], json_option, low=0)
    single = option_int(values, single_option, None, 0)
    if by_timestamp is not None and single is not None:
        raise OptionError(f"options {single_option} and {json_option} exclude each other")
    return by_timestamp, single


def _group_id(values: dict[str, str]) -> str | None:
    group_id, prefix = values.get(GROUP_ID), values.get(GROUP_ID_PREFIX)
    if group_id is not None and prefix is not None:
        raise OptionError(f"options {GROUP_ID} and {GROUP_ID_PREFIX} exclude each other "
                          f"({GROUP_ID_PREFIX} makes a group per reader: <prefix>-<id>)")
    if prefix is not None:
        option_name(GROUP_ID_PREFIX, prefix)
        return option_name(GROUP_ID_PREFIX, f"{prefix}-{uuid.uuid4().hex[:12]}")
    return None if group_id is None else option_name(GROUP_ID, group_id)


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate reader options; raises OptionError naming the option. With groupIdPrefix,
    each call makes a new group id (a reader's own group, as Spark's Kafka source does)."""
    values = _normalize(options, READ_OPTIONS)
    tls, keys_file = _client_config(values)
    brokers, controller = _endpoints(values)
    subscribe, pattern, assign = _subscription(values)
    by_timestamp, starting_timestamp = _by_timestamp(values, STARTING_OFFSETS_BY_TIMESTAMP,
                                                     STARTING_TIMESTAMP)
    ending_by_timestamp, ending_timestamp = _by_timestamp(values, ENDING_OFFSETS_BY_TIMESTAMP,
                                                          ENDING_TIMESTAMP)
    max_per_trigger = option_int(values, MAX_OFFSETS_PER_TRIGGER, None, 1)
    min_per_trigger = option_int(values, MIN_OFFSETS_PER_TRIGGER, None, 1)
    if max_per_trigger is not None and min_per_trigger is not None \
            and min_per_trigger > max_per_trigger:
        raise OptionError(f"option {MIN_OFFSETS_PER_TRIGGER} ({min_per_trigger}) must be <= "
                          f"{MAX_OFFSETS_PER_TRIGGER} ({max_per_trigger})")
    return SourceOptions(
        brokers=brokers, controller=controller,
        request_timeout_ms=option_duration_ms(values, REQUEST_TIMEOUT_MS, 10_000, low=1),
        subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting=_starting(values), starting_by_timestamp=by_timestamp,
        starting_timestamp_ms=starting_timestamp, ending=_ending(values),
        ending_by_timestamp=ending_by_timestamp, ending_timestamp_ms=ending_timestamp,
        starting_strategy=option_choice(values, STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY, STRATEGIES),
        fail_on_data_loss=option_bool(values, FAIL_ON_DATA_LOSS, True), tls=tls,
        max_offsets_per_trigger=max_per_trigger, min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=option_duration_ms(values, MAX_TRIGGER_DELAY, 15 * 60_000),
        min_partitions=option_int(values, MIN_PARTITIONS, None, 1, 1 << 20),
        min_rows_per_partition=option_int(values, MIN_ROWS_PER_PARTITION,  # type: ignore[arg-type]
                                    MIN_ROWS_PER_PARTITION_DEFAULT, 0, 1 << 40),
        max_records_per_partition=option_int(values, MAX_RECORDS_PER_PARTITION, None, 1),
        tag_filter=_tag_filter(values),
        read_from_replicas=option_bool(values, READ_FROM_REPLICAS, False),
        group_id=_group_id(values),
        fetch_max_messages=option_int(values, FETCH_MAX_MESSAGES, 65536, 1, 1 << 20),  # type: ignore
        fetch_max_bytes=option_int(values, FETCH_MAX_BYTES, 32 << 20, 1024, 1 << 30),  # type: ignore
        fetch_timeout_ms=option_duration_ms(values, FETCH_TIMEOUT_MS, 60_000, low=1),
        read_cold_from_tier=option_bool(values, READ_COLD_FROM_TIER, False),
        tier_storage_options=_tier_storage_options(values),
        columns=_columns(values),
        credentials=_credentials(values, keys_file),
        worker_gc_freeze=option_bool(values, WORKER_GC_FREEZE, True),
    )


def _credentials(values: Mapping[str, str], keys_file: str | None = None
                 ) -> Credentials | None:
    """accessKey + secretKey, or credentialsFile, else the keys of the clientConfig file
    (`keys_file`); none: unsigned calls. Errors never quote a secret."""
    access_key, secret_key = values.get(ACCESS_KEY), values.get(SECRET_KEY)
    path = values.get(CREDENTIALS_FILE)
    if path is None and access_key is None and secret_key is None and keys_file is not None:
        try:
            return read_credentials_file(keys_file, f"option {CLIENT_CONFIG}: keys file")
        except (OSError, ValueError) as err:
            raise OptionError(str(err)) from None
    if path is not None:
        if access_key is not None or secret_key is not None:
            raise OptionError(f"option {CREDENTIALS_FILE} excludes {ACCESS_KEY} and "
                              f"{SECRET_KEY}")
        try:
            return read_credentials_file(path, f"option {CREDENTIALS_FILE}")
        except (OSError, ValueError) as err:
            raise OptionError(str(err)) from None
    if (access_key is None) != (secret_key is None):
        raise OptionError(f"options {ACCESS_KEY} and {SECRET_KEY} go together")
    if access_key is None or secret_key is None:
        return None
    if not access_key.strip() or not secret_key:
        raise OptionError(f"options {ACCESS_KEY} and {SECRET_KEY} must not be empty")
    return Credentials(access_key.strip(), secret_key)


def _columns(values: dict[str, str]) -> tuple[str, ...]:
    """The default schema's columns: `columns` (a list of ours and Kafka's names, * for all of
    ours, or kafka for Kafka's set), else the lean default plus what the include options add.
    A list excludes the include options; kafka takes includeHeaders only (Kafka's option)."""
    include_properties = option_bool(values, INCLUDE_PROPERTIES, False)
    include_metadata = option_bool(values, INCLUDE_METADATA, False)
    include_headers = option_bool(values, INCLUDE_HEADERS, False)
    text = values.get(COLUMNS)
    if text is None:
        return with_extras(include_properties=include_properties,
                           include_metadata=include_metadata, include_headers=include_headers)
    if text.strip().lower() == KAFKA_COLUMNS:
        if INCLUDE_PROPERTIES in values or INCLUDE_METADATA in values:
            raise OptionError(f"option {COLUMNS}={KAFKA_COLUMNS} excludes {INCLUDE_PROPERTIES} "
                              f"and {INCLUDE_METADATA} (list the columns instead); "
                              f"{INCLUDE_HEADERS} adds Kafka's headers")
        return kafka_columns(include_headers=include_headers)
    if INCLUDE_PROPERTIES in values or INCLUDE_METADATA in values or INCLUDE_HEADERS in values:
        raise OptionError(f"option {COLUMNS} excludes {INCLUDE_PROPERTIES}, {INCLUDE_METADATA} "
                          f"and {INCLUDE_HEADERS} (list the columns instead)")
    if text.strip() == "*":
        return ALL_COLUMN_NAMES
    names = tuple(part.strip() for part in text.split(","))
    by_lower = {name.lower(): name for name in COLUMN_DDL_TYPES}
    result: list[str] = []
    for part in names:
        name = by_lower.get(part.lower())
        if name is None:
            raise OptionError(f"option {COLUMNS}: unknown column {part!r}; the source's "
                              f"columns are {', '.join(COLUMN_DDL_TYPES)} (or *, or "
                              f"{KAFKA_COLUMNS})")
        if name in result:
            raise OptionError(f"option {COLUMNS}: column {name!r} is listed twice")
        result.append(name)
    return tuple(result)


def _tier_storage_options(values: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """tierStorageOptions, with tierS3AccessKeyId / tierS3SecretAccessKey as `key`/`secret`."""
    merged = dict(option_string_map(values, TIER_STORAGE_OPTIONS))
    for option, key in ((TIER_S3_ACCESS_KEY_ID, "key"), (TIER_S3_SECRET_ACCESS_KEY, "secret")):
        if option in values:
            if key in merged:
                raise OptionError(f"option {option}: also given as {key!r} in "
                                  f"{TIER_STORAGE_OPTIONS}; give it once")
            merged[key] = values[option]
    return tuple(sorted(merged.items()))


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate writer options; raises OptionError naming the option."""
    values = _normalize(options, WRITE_OPTIONS)
    tls, keys_file = _client_config(values)
    brokers, controller = _endpoints(values)
    topic = values.get(TOPIC)
    statuses_text = values.get(ACCEPT_STATUSES, "PUT_OK")
    statuses = frozenset(part.strip().upper() for part in statuses_text.split(",")
                         if part.strip())
    unknown = sorted(statuses - _PUT_STATUSES)
    if not statuses or unknown:
        raise OptionError(f"option {ACCEPT_STATUSES}: {statuses_text!r} must list put statuses "
                          f"from {sorted(_PUT_STATUSES)} (unknown: {unknown})")
    return SinkOptions(
        brokers=brokers, controller=controller,
        request_timeout_ms=option_duration_ms(values, REQUEST_TIMEOUT_MS, 10_000, low=1),
        topic=None if topic is None else option_name(TOPIC, topic),
        accept_statuses=statuses,
        exactly_once=option_bool(values, EXACTLY_ONCE, True),
        write_batch_rows=option_int(values, WRITE_BATCH_ROWS, 4096, 1, 65536),  # type: ignore
        write_batch_bytes=option_int(values, WRITE_BATCH_BYTES, 4 << 20, 1024,  # type: ignore
                               64 << 20),
        tls=tls,
        credentials=_credentials(values, keys_file),
        worker_gc_freeze=option_bool(values, WORKER_GC_FREEZE, True),
    )
