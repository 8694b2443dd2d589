"""Changing a running broker's configuration (`rocketha-admin broker config set`).

A change is checked the way start-up reads the file: the conf file's text with the one setting
changed (conf.set_property: comments, blank lines, order and every other line kept) must parse
into a BrokerConfig (BrokerConfig.from_properties), and a live key must fit the running config;
else the change is refused with a ConfigError naming the key, and neither the file nor the broker
changed. The new text then replaces the file atomically (a temp file, fsync, rename, directory
fsync: a crash leaves the old file or the new one), so a restart keeps the change. Only then does
a live key (ha/broker/config.py LIVE_KEYS) apply, at once; any other key waits for the next start
and is pending until then (`broker info` lists it: "pending_restart").

The file is written before the running config changes, so a change that could not be kept is not
made at all. Changes run one at a time (a lock over read file, write file, replace config): two
concurrent changes both land, in the file and in the running config.

A broker started without a conf file (an in-process test's BrokerService) takes live keys in
memory only (`persisted` false) and refuses the others.

`plan_change` is the sans-IO core; LiveConfig is the shell that reads and writes the file.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from conf import PropertiesError, format_property, set_property, unknown_key_message
from ha.broker.config import (
    BROKER_KEYS,
    LIVE_KEYS,
    MASKED,
    SECRET_KEYS,
    BrokerConfig,
    live_update,
    parse_properties,
)
from storage_engine import ConfigError, atomic_write_bytes

__all__ = ["Change", "LiveConfig", "plan_change"]

logger = logging.getLogger("ha.broker.service")


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """What `broker config set` did: `value` as the reply may show it (a secret masked)."""

    key: str
    value: str
    live: bool  # applied at once (else: at the next start)
    persisted: bool  # written to the conf file

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "value": self.value, "live": self.live,
                "persisted": self.persisted, "restart_needed": not self.live}


def plan_change(text: str, source: str, running: BrokerConfig, key: str,
                value: str) -> tuple[str, BrokerConfig]:
    """(the conf text with `key` set to `value`, the running config after the change: the same
    object for a key that is not live).

    Raises ConfigError naming the key (or the file's line): an unknown key, a bad value, a
    value that does not fit the other keys, a conf text that no longer reads.
    """
    if key not in BROKER_KEYS:
        raise ConfigError(key, unknown_key_message(key, BROKER_KEYS))
    if "\n" in value or "\r" in value:
        raise ConfigError(key, "a value is one line")
    try:
        new_text = set_property(text, key, value, source)
    except PropertiesError as err:
        raise ConfigError(err.location, err.reason) from err
    described = BrokerConfig.from_properties(parse_properties(new_text, source))
    return new_text, live_update(running, described, key) if key in LIVE_KEYS else running


class LiveConfig:
    """The conf file of a running broker, the settings it started with, and the changes that
    wait for a restart."""

    def __init__(self, path: Path | None, start_properties: Mapping[str, str]) -> None:
        self.path = path
        self.start_properties = dict(start_properties)
        self._pending: dict[str, str] = {}  # key -> value the next start will use (masked)
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> LiveConfig:
        path = Path(path)
        return cls(path, parse_properties(path.read_text(encoding="utf-8"), str(path)))

    def pending_restart(self) -> dict[str, str]:
        with self._lock:
            return dict(sorted(self._pending.items()))

    def change(self, running: Callable[[], BrokerConfig], apply: Callable[[BrokerConfig], None],
               key: str, value: str) -> Change:
        """Check, persist, then apply (a live key) or record as pending (any other).

        Args:
            running: the broker's config now (read under the lock).
            apply: installs the config after a live change.
        Raises:
            ConfigError: refused, nothing changed.
            OSError: the conf file could not be read or replaced, nothing changed.
        """
        shown = MASKED if key in SECRET_KEYS and value else value
        with self._lock:
            if self.path is None:
                if key not in LIVE_KEYS:
                    raise ConfigError(key, "not a live key, and this broker has no conf file "
                                      "to keep it in for its next start")
                text = "".join(f"{format_property(k, v)}\n"
                               for k, v in self.start_properties.items())
                _, config = plan_change(text, "<start-up settings>", running(), key, value)
                apply(config)
                return Change(key, shown, live=True, persisted=False)
            text = self.path.read_text(encoding="utf-8")
            new_text, config = plan_change(text, str(self.path), running(), key, value)
            if new_text != text:
                atomic_write_bytes(self.path, new_text.encode("utf-8"),
                                   mode=self.path.stat().st_mode & 0o7777)
            live = key in LIVE_KEYS
            if live:
                apply(config)
            elif value == self.start_properties.get(key):
                self._pending.pop(key, None)  # back to what it runs with
            else:
                self._pending[key] = shown
        logger.warning("configuration: %s=%s %s (written to %s)", key, shown,
                       "applied" if live else "applies at the next start", self.path)
        return Change(key, shown, live=live, persisted=True)
