"""`up --set/--set-file/--unset`: the broker keys a local cluster keeps, checked before saving.

`up` remembers its broker overrides in cluster.json so a later `up` (a restart) keeps them.
A key or value no broker accepts must therefore never reach that file: once saved, every
later `up` would start brokers that refuse their config, until someone edits cluster.json by
hand. So the overrides a command would keep (the kept ones, minus `--unset`, plus the new
ones) are checked the way a broker will check them (BrokerConfig.from_properties, on a
minimal broker config) before anything is written; a refusal is one line naming the key,
with the nearest known key for a typo (conf.keys) and, for a key kept from an earlier `up`,
the `--unset` that removes it.
"""

from __future__ import annotations

from collections.abc import Mapping

from conf import unknown_key_message
from controller.config import CONTROLLER_KEYS
from ha.broker import BROKER_KEYS, BrokerConfig
from storage_engine import ConfigError

__all__ = ["broker_overrides_problem", "controller_overrides_problem", "unset_overrides"]

# What every broker of a local cluster has anyway; the overrides are checked on top of it.
_BASELINE = {"brokerName": "broker-a", "storePathRootDir": "/nonexistent/rocketha-check"}
# Checked only with the settings `up` writes alongside (ports, controller mode, TLS files).
_CROSS_KEY_ONLY = frozenset({"enableControllerMode", "controllerAddr", "haMasterAddress"})


def unset_overrides(kept: Mapping[str, str], unset: list[str]) -> tuple[dict[str, str], str | None]:
    """`kept` without the `--unset` keys, or a problem when one of them is not kept."""
    remaining = dict(kept)
    for key in unset:
        if key not in remaining:
            known = ", ".join(sorted(remaining)) or "none"
            return remaining, (f"--unset {key}: not a kept broker key (kept: {known})")
        del remaining[key]
    return remaining, None


def broker_overrides_problem(overrides: Mapping[str, str], kept: Mapping[str, str],
                             replicas: int = 1) -> str | None:
    """None when a broker accepts `overrides`, else one line saying what is wrong.

    `replicas`: brokers per replica set (the quorum keys are checked against it).
    `kept`: the overrides cluster.json held before this command (a problem there also says
    how to drop it: the file was written by an older version that did not check)."""
    for key in overrides:
        if key not in BROKER_KEYS:
            return _with_unset(f"--set {key}: {unknown_key_message(key, BROKER_KEYS)}", key, kept)
    checked = {k: v for k, v in overrides.items() if k not in _CROSS_KEY_ONLY}
    try:
        baseline = {**_BASELINE, "totalReplicas": str(replicas)} if replicas > 1 else _BASELINE
        BrokerConfig.from_properties({**baseline, **checked})
    except ConfigError as err:
        if err.key in overrides:
            return _with_unset(f"--set {err}", err.key, kept)
    except ValueError as err:  # a key's own parser, not wrapped as ConfigError
        return f"--set: {err}"
    return None


def _with_unset(problem: str, key: str, kept: Mapping[str, str]) -> str:
    if key in kept:
        return f"{problem} (kept from an earlier up: `up --unset {key}` removes it)"
    return problem


def controller_overrides_problem(overrides: Mapping[str, str]) -> str | None:
    """`--controller-set` keys are kept too (cluster.json's controller_overrides): a key no
    controller knows is refused with the nearest known one (values: the controller's own
    start-up check)."""
    for key in overrides:
        if key not in CONTROLLER_KEYS:
            return f"--controller-set {key}: {unknown_key_message(key, CONTROLLER_KEYS)}"
    return None
