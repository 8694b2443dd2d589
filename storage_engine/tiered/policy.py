"""Pure decisions of the uploader: what to upload after a (re)start, retry backoff, and the
bandwidth throttle. No IO, no clock: callers pass `now_ms` / `now_s`.

Resume after a crash or a failover (`plan_uploads`), per sealed local segment:

    in the manifest                        -> done (never uploaded twice)
    below retired_below_log_position       -> done (tier retention already dropped it)
    younger than tieredUploadDelayMs       -> wait
    being uploaded now / backing off       -> wait
    otherwise                              -> upload (oldest first; an object of ours already
                                              under its final name but not listed is a leftover
                                              of a crash between write and commit: the upload
                                              rewrites it whole, same name, same bytes)

Objects under segments/ that no manifest lists are invisible to readers; the plan removes the
ones nobody will list: temporary names (a file:// write cut by SIGKILL) whose upload is not
running, names below retired_below_log_position, and names of a base the manifest lists
under another epoch (a deposed master's late write).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence

from storage_engine.tiered.layout import Manifest, parse_segment_name

__all__ = ["LocalSegment", "Throttle", "UploadPlan", "backoff_ms", "plan_uploads"]

TEMP_MARKER = ".tmp-"


@dataclasses.dataclass(frozen=True, slots=True)
class LocalSegment:
    """A sealed local CommitLog segment wholly below the confirm position."""

    base_log_position: int
    size_bytes: int
    mtime_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class UploadPlan:
    upload: tuple[int, ...] = ()  # bases, oldest first
    remove_objects: tuple[str, ...] = ()  # names under segments/ to delete


def _temp_base(name: str) -> int | None:
    stem, marker, _ = name.partition(TEMP_MARKER)
    parsed = parse_segment_name(stem) if marker else None
    return None if parsed is None else parsed[0]


def plan_uploads(manifest: Manifest, local: Sequence[LocalSegment], object_names: Iterable[str],
                 *, now_ms: int, delay_ms: int, busy: Collection[int] = ()) -> UploadPlan:
    """What to upload and what to clean, from the manifest and a listing (see the module doc).
    `busy`: bases being uploaded or waiting out a retry backoff."""
    listed = set(manifest.bases)
    listed_names = {segment.object_name for segment in manifest.segments}
    retired = manifest.retired_below_log_position
    upload = tuple(sorted(
        segment.base_log_position for segment in local
        if segment.base_log_position not in listed and segment.base_log_position >= retired
        and segment.base_log_position not in busy and now_ms - segment.mtime_ms >= delay_ms))
    remove = []
    for name in object_names:
        temp_base = _temp_base(name)
        if temp_base is not None and temp_base not in busy:
            remove.append(name)
            continue
        parsed = parse_segment_name(name)
        if parsed is None or name in listed_names or parsed[0] in busy:
            continue
        if parsed[0] < retired or parsed[0] in listed:
            remove.append(name)
    return UploadPlan(upload, tuple(sorted(remove)))


def backoff_ms(failures: int, *, min_ms: int, max_ms: int) -> int:
    """Delay before attempt `failures + 1`: min, 2*min, 4*min, ... capped at max."""
    assert failures >= 1 and 0 < min_ms <= max_ms
    return min(max_ms, min_ms << min(failures - 1, 40))


class Throttle:
    """A token bucket over bytes (tieredUploadBytesPerSecMax, shared by every upload).

    `reserve(n, now_s)` takes n bytes' worth of tokens and returns how long to wait before
    sending them; the bucket may go into debt, so a chunk larger than the burst still passes
    at the configured rate. Not thread-safe: the caller holds a lock."""

    def __init__(self, rate_bytes_per_s: int, burst_bytes: int) -> None:
        assert rate_bytes_per_s > 0 and burst_bytes > 0
        self.rate_bytes_per_s = rate_bytes_per_s
        self.burst_bytes = burst_bytes
        self._tokens = float(burst_bytes)
        self._last_s: float | None = None

    def reserve(self, size_bytes: int, now_s: float) -> float:
        if self._last_s is not None:
            elapsed = max(0.0, now_s - self._last_s)
            self._tokens = min(float(self.burst_bytes),
                               self._tokens + elapsed * self.rate_bytes_per_s)
        self._last_s = now_s
        self._tokens -= size_bytes
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate_bytes_per_s
