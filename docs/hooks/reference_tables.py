"""Reference tables generated at docs build time from the code's own key and option tables.

An MkDocs hook (mkdocs.yml `hooks:`): a page holds a marker line such as

    <!-- rocketha-table broker-keys -->

and the build replaces it with a Markdown table. What exists comes from the code (the key set a
process accepts, the options a Spark source or sink accepts, the wire code table, the client
dataclasses), so a table can never list a key the code dropped nor miss one it added. What a key
means (and, where the code keeps no default of its own, its default) comes from the data files in
docs/_data/; the build fails, naming the key and the file, when the two disagree either way.

Where a code table already carries `conf.keys.Key` objects (name, default, allowed, unit, doc),
those win over the data file, so moving a table onto `Key` needs no change here.

The renderers are plain functions (`render(name) -> str`), tested by tests/docs/.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT / "docs" / "_data"
MARKER = re.compile(r"^<!-- rocketha-table (?P<name>[a-z0-9:-]+) -->$", re.MULTILINE)

if str(ROOT) not in sys.path:  # the hook runs inside mkdocs: make the checkout importable
    sys.path.insert(0, str(ROOT))


class TableError(Exception):
    """The code and docs/_data disagree, or a marker names no table."""


def _data(name: str) -> dict[str, Any]:
    path = DATA_DIR / f"{name}.yml"
    loaded = yaml.safe_load(path.read_text())
    if not isinstance(loaded, dict):
        raise TableError(f"{path}: expected a mapping of key -> description")
    return loaded


def _check_same(code: Iterable[str], described: Iterable[str], what: str, data: str) -> None:
    code_set, described_set = set(code), set(described)
    missing = sorted(code_set - described_set)
    stale = sorted(described_set - code_set)
    if missing:
        raise TableError(f"{what}: {missing} exist in the code but have no entry in "
                         f"docs/_data/{data}.yml: describe them there")
    if stale:
        raise TableError(f"{what}: {stale} are described in docs/_data/{data}.yml but the "
                         "code no longer knows them: remove them there")


def _cell(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        value = str(value).lower()
    text = str(value).replace("|", "\\|")
    return text if " " in text else f"`{text}`"  # prose ("a third of ...") stays prose


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _code_keys(table: Any) -> dict[str, Any]:
    """name -> the code's entry (a `Key`, or whatever the older table shape holds)."""
    if isinstance(table, Mapping):
        return dict(table)
    return {getattr(entry, "name", entry): entry for entry in table}


def _key_entry(code_entry: Any, described: Mapping[str, Any]) -> dict[str, Any]:
    entry = dict(described)
    if hasattr(code_entry, "doc") and hasattr(code_entry, "default"):  # a conf.keys.Key
        entry.update({"default": code_entry.default, "doc": code_entry.doc or entry.get("doc"),
                      "unit": code_entry.unit or entry.get("unit", ""),
                      "allowed": ", ".join(code_entry.allowed) or entry.get("allowed", "")})
    return entry


def _process_keys(process: str, table: Any, group: str | None,
                  live: frozenset[str] | None = None) -> str:
    """The key tables of a process, by group; with `live` (the broker's LIVE_KEYS), a column
    saying which keys `broker config set` applies at once."""
    code = _code_keys(table)
    data = _data(process)
    _check_same(code, data, f"{process} keys", process)
    groups: dict[str, list[str]] = {}
    for name in sorted(code, key=str.lower):
        groups.setdefault(data[name].get("group", "other"), []).append(name)
    if group is not None and group not in groups:
        raise TableError(f"{process} keys: no group {group!r} (groups: {sorted(groups)})")
    parts = []
    for name_of_group in ([group] if group else sorted(groups)):
        rows = []
        for name in groups[name_of_group]:
            entry = _key_entry(code[name], data[name])
            meaning = entry.get("doc", "")
            if entry.get("allowed"):
                meaning += f" Allowed: {entry['allowed']}."
            row = (f"`{name}`", _cell(entry.get("default")), entry.get("unit", ""), meaning)
            rows.append(row if live is None else (*row[:3], "yes" if name in live else "",
                                                  row[3]))
        header = ("key", "default", "unit", "meaning")
        table_text = _table(header if live is None else (*header[:3], "live", header[3]),
                            rows)
        parts.append(table_text if group else f"### {process.capitalize()}: "
                     f"{name_of_group}\n\n{table_text}")
    return "\n\n".join(parts)


def broker_keys(group: str | None = None) -> str:
    from ha.broker import BROKER_KEYS, LIVE_KEYS
    return _process_keys("broker", BROKER_KEYS, group, LIVE_KEYS)


def controller_keys(group: str | None = None) -> str:
    from controller.config import CONTROLLER_KEYS
    return _process_keys("controller", CONTROLLER_KEYS, group)


def proxy_keys(group: str | None = None) -> str:
    """The proxy's keys map onto ProxyConfig's fields, whose defaults are the code's own."""
    from connector.rmq_proxy.config import PROXY_KEYS, ProxyConfig
    data = _data("proxy")
    _check_same(PROXY_KEYS, data, "proxy keys", "proxy")
    defaults = {field.name: field.default for field in dataclasses.fields(ProxyConfig)}
    rows = []
    for name in sorted(PROXY_KEYS, key=str.lower):
        field_name = PROXY_KEYS[name][0]
        rows.append((f"`{name}`", _cell(defaults.get(field_name)),
                     data[name].get("unit", ""), data[name]["doc"]))
    return _table(("key", "default", "unit", "meaning"), rows)


def spark_options(group: str | None = None) -> str:
    from connector.spark.compat import FEATURE_SINCE, SUPPORTED
    from connector.spark.datasource import OPTION_FEATURES
    from connector.spark.options import READ_OPTIONS, WRITE_OPTIONS
    oldest = "{}.{}".format(*SUPPORTED[0])
    data = _data("spark")
    _check_same(READ_OPTIONS | WRITE_OPTIONS, data, "Spark options", "spark")
    rows = []
    for name in sorted(READ_OPTIONS | WRITE_OPTIONS, key=str.lower):
        entry = data[name]
        if group is not None and entry.get("group") != group:
            continue
        used_by = " + ".join(side for side, names in (("source", READ_OPTIONS),
                                                        ("sink", WRITE_OPTIONS))
                             if name in names)
        rows.append((f"`{name}`", used_by, _cell(entry.get("default")),
                     _cell(entry.get("kafka")),
                     str(entry.get("spark") or FEATURE_SINCE.get(OPTION_FEATURES.get(name, ""),
                                                                 oldest)),
                     entry["doc"]))
    if not rows:
        raise TableError(f"Spark options: no group {group!r}")
    return _table(("option", "used by", "default", "Kafka equivalent", "Spark", "meaning"), rows)


def client_fields(group: str | None = None) -> str:
    import connector
    data = _data("client")
    classes = [group] if group else sorted(data)
    parts = []
    for class_name in classes:
        cls = getattr(connector, class_name)
        fields = dataclasses.fields(cls)
        _check_same((field.name for field in fields), data[class_name],
                    f"{class_name} fields", "client")
        rows = []
        for field in fields:
            default = field.default
            if default is dataclasses.MISSING:
                factory = field.default_factory
                default = factory() if factory is not dataclasses.MISSING else ""
            rows.append((f"`{field.name}`", _cell(default), data[class_name][field.name]))
        parts.append(_table(("field", "default", "meaning"), rows))
    return "\n\n".join(parts)


def error_codes(group: str | None = None) -> str:
    from connector.protocol import CODES
    rows = [(str(entry.code), f"`{entry.name}`", "yes" if entry.retriable else "",
             "yes" if entry.refresh_route else "", "yes" if entry.stored else "")
            for entry in sorted(CODES.values(), key=lambda entry: entry.code)]
    return _table(("code", "name", "retriable", "refresh route", "stored"), rows)


RENDERERS: dict[str, Callable[[str | None], str]] = {
    "broker-keys": broker_keys,
    "controller-keys": controller_keys,
    "proxy-keys": proxy_keys,
    "spark-options": spark_options,
    "client-fields": client_fields,
    "error-codes": error_codes,
}


def render(name: str) -> str:
    """The table a marker names: `broker-keys` or `broker-keys:replication` (one group)."""
    table, _, group = name.partition(":")
    if table not in RENDERERS:
        raise TableError(f"unknown table {table!r} (known: {sorted(RENDERERS)})")
    return RENDERERS[table](group or None)


def replace_markers(markdown: str) -> str:
    return MARKER.sub(lambda match: render(match.group("name")), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError
    try:
        return replace_markers(markdown)
    except TableError as err:
        raise PluginError(f"{page.file.src_path}: {err}") from err
