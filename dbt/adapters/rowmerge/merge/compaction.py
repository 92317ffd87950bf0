"""Which files a compaction rewrites, and into how many files: plain Python over a listing.

Two policies, both per partition (a compaction never moves a row to another partition):

* **Tiered** (after a merge, bounded): files are sorted into size tiers, each
  :data:`TIER_FACTOR` times the one below it; a tier that holds ``min_files`` files merges
  them into one (about ``min_files`` times bigger, so into the next tier). A 50 KB file waits
  only for seven others of its size, never for a 128 MB budget, and a big file is never
  rewritten to absorb a tiny one. Work per merge is bounded (``max_files``, ``max_bytes``),
  smallest tiers first; what is left waits for the next merge. As in an LSM tree, a file is
  rewritten about once per tier, so the cost is amortized over the merges that wrote it: an
  hourly model's small files become one file per tier rather than one per hour. Where the
  journal knows every file's range of the cluster key, a tier's runs go in key order, and a run
  whose output's range would take in a file left out of it waits: no compacted file's range
  has a hole that another file's keys fill, which would make a later merge read (and the
  one-pass write rewrite) a file that holds none of its keys.
* **Settling** (after a merge, in a partitioned table): a partition the versions just before
  the merge wrote and the merge did not has settled — an hourly model has moved on to the next
  day. Tiers leave up to ``min_files - 1`` files of each size in it for good (a day of 24
  hourly files ends as three files of eight), so its small files are bin-packed once, as
  ``optimize`` would, and the partition holds as few files as a rebuild would give it.
* **Bin-packing** (``optimize``): every file below half the target size, in bins of at most
  the target size; with ``cluster`` every file of a partition whose key ranges overlap another's
  is rewritten, sorted, so each key range lies in one file again (file skipping works again).

Files at or above half the target size are full: two of them would exceed it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .key_gaps import Others, gaps

# The smallest tier holds files up to base * TIER_FACTOR bytes, tier k up to
# base * TIER_FACTOR ** (k + 1), where base is the target size / TIER_BASE_DIVISOR (64 KB for
# 128 MB): tiers 0-2 then end at 512 KB, 4 MB and 32 MB (a quarter of the target). With the
# default 8 files per merge, a tier's merge lands in the next tier.
TIER_BASE_DIVISOR = 2048
TIER_FACTOR = 8
FULL_FRACTION = 0.5  # a file this fraction of the target size or more is left alone


@dataclass(frozen=True)
class DataFile:
    """A file of the table as the planner sees it."""

    path: str  # qualified
    size: int
    partition: str  # its folder below the table ("" unpartitioned)
    order: Any = 0  # how files of one tier are taken, oldest (or lowest key) first
    key_range: tuple[Any, Any] | None = None  # the cluster key's (min, max), if known


@dataclass(frozen=True)
class Group:
    """Files of one partition rewritten together into ``outputs`` files."""

    partition: str
    files: tuple[DataFile, ...]
    outputs: int

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def partition_of(path: str, location: str) -> str:
    """The partition folder of ``path`` below ``location`` ("" for an unpartitioned table)."""
    rel = path[len(location.rstrip("/")) + 1 :]
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def tier(size: int, target_bytes: int) -> int:
    """The size tier of a file of ``size`` bytes, for a table whose target is ``target_bytes``."""
    base = max(1.0, target_bytes / TIER_BASE_DIVISOR)
    if size <= base * TIER_FACTOR:
        return 0
    return int(math.log(size / base, TIER_FACTOR))


def outputs(size: int, target_bytes: int) -> int:
    """How many files of about the target size ``size`` bytes of input become."""
    return max(1, round(size / target_bytes)) if size > target_bytes else 1


def _by_partition(files: Iterable[DataFile]) -> dict[str, list[DataFile]]:
    out: dict[str, list[DataFile]] = {}
    for f in files:
        out.setdefault(f.partition, []).append(f)
    return out


def tiered(
    files: Sequence[DataFile],
    target_bytes: int,
    min_files: int,
    max_files: int,
    max_bytes: int,
    idle: Collection[str] = (),
    neighbours: Sequence[DataFile] = (),
) -> list[Group]:
    """The groups a merge compacts now (empty: no tier of any partition is full yet).

    Files whose path is in ``idle`` (the table as it was created) never start a compaction:
    they only fill a tier's run once files written since have reached that tier, so a table's
    first merges do not pay for rewriting the table they found, while its small files are
    still folded in, a run at a time, as the merges' own files grow into their tier.
    ``neighbours``: every file of the table, ``files`` and those left out of this compaction
    (the merge's own), whose key ranges a run must not take in (:func:`_straddles`)."""
    full = target_bytes * FULL_FRACTION
    ready: list[tuple[int, str, list[DataFile]]] = []
    around = _by_partition(neighbours or files)
    for partition, found in sorted(_by_partition(files).items()):
        beside = around.get(partition, found)
        by_key = _ranges_known([*found, *beside])
        tiers: dict[int, list[DataFile]] = {}
        for f in found:
            if f.size < full:
                tiers.setdefault(tier(f.size, target_bytes), []).append(f)
        for level, members in sorted(tiers.items()):
            if by_key:
                ready += [(level, partition, run) for run in _key_runs(members, beside, min_files, idle)]
                continue
            # written files oldest first, then the idle ones: whole runs of min_files, each
            # with a written file in it, land in the next tier
            members.sort(key=lambda f: (f.path in idle, f.order, f.path))
            for start in range(0, len(members) - min_files + 1, min_files):
                run = members[start : start + min_files]
                if run[0].path in idle:
                    break
                ready.append((level, partition, run))
    ready.sort(key=lambda r: r[0])  # smallest tiers first: most files gone per byte
    out: list[Group] = []
    taken_files = taken_bytes = 0
    for _, partition, members in ready:
        size = sum(f.size for f in members)
        if taken_files + len(members) > max_files or taken_bytes + size > max_bytes:
            continue  # a later merge takes it (or optimize)
        out.append(Group(partition, tuple(members), outputs(size, target_bytes)))
        taken_files += len(members)
        taken_bytes += size
    return out


def _key_runs(
    members: Sequence[DataFile], beside: Sequence[DataFile], min_files: int, idle: Collection[str]
) -> list[list[DataFile]]:
    """A tier's runs where every file's key range is known: the written files in key order,
    min_files at a time; a last, short run is filled with the idle files nearest it in key
    order (those between its files first: they would be holes). A run that would still take
    in a file left out of it waits (:func:`_straddles`)."""
    written = sorted((f for f in members if f.path not in idle), key=lambda f: (_low(f), f.path))
    spare = [f for f in members if f.path in idle]
    runs = []
    for start in range(0, len(written), min_files):
        run: list[DataFile] | None = written[start : start + min_files]
        if run is not None and len(run) < min_files:
            run = _filled(run, spare, min_files)
        if run is None:
            break
        if not _straddles(run, beside):
            runs.append(run)
    return runs


def _filled(run: list[DataFile], spare: Sequence[DataFile], min_files: int) -> list[DataFile] | None:
    """``run`` with idle files added until it holds min_files: those whose keys lie within its
    span first, then the nearest below or above it in key order; None if too few."""
    if len(run) + len(spare) < min_files:
        return None
    line = sorted([*run, *spare], key=lambda f: (_low(f), f.path))
    members = {f.path for f in run}
    first = min(i for i, f in enumerate(line) if f.path in members)
    last = max(i for i, f in enumerate(line) if f.path in members)
    taken = list(line[first : last + 1])
    below, above = first - 1, last + 1
    while len(taken) < min_files:
        if below >= 0 and (above >= len(line) or len(taken) % 2):
            taken.insert(0, line[below])
            below -= 1
        else:
            taken.append(line[above])
            above += 1
    return taken


def _ranges_known(files: Sequence[DataFile]) -> bool:
    """Whether every file has a known key range whose bounds compare with the others'."""
    if any(f.key_range is None or None in f.key_range for f in files):
        return False
    try:
        sorted(b for f in files for b in f.key_range)  # type: ignore[union-attr]
    except TypeError:  # values that do not compare
        return False
    return True


def _low(f: DataFile) -> Any:
    assert f.key_range is not None
    return f.key_range[0]


def _straddles(run: Sequence[DataFile], files: Sequence[DataFile]) -> bool:
    """Whether a file left out of the run holds keys in a gap between the run's own key ranges
    (:mod:`.key_gaps`): the run's output would span them, and a later merge touching one would
    find both files candidates. Where the run's ranges leave no gap (files of random keys each
    span most of the range), nothing waits: the output's range is no wider than its inputs'
    together; nor for a file that spans the whole run (see :meth:`.key_gaps.Others.hold_keys_in`)."""
    spans = [f.key_range for f in run if f.key_range is not None]
    holes = gaps(spans)
    if not holes:
        return False
    written = (min(low for low, _ in spans), max(high for _, high in spans))
    members = {f.path for f in run}
    others = Others(f.key_range for f in files if f.path not in members and f.key_range is not None)
    return any(others.hold_keys_in(hole, written) for hole in holes)


def settled(
    files: Sequence[DataFile], partitions: Collection[str], target_bytes: int, max_files: int, max_bytes: int
) -> list[Group]:
    """The groups that pack the small files of each partition in ``partitions`` (those the
    writes have moved away from), within the per-merge bounds; a partition that does not fit
    this merge's bounds waits for the next one."""
    out: list[Group] = []
    taken_files = taken_bytes = 0
    for partition in sorted(partitions):
        groups = bin_packed([f for f in files if f.partition == partition], target_bytes, cluster=False)
        files_in = sum(len(g.files) for g in groups)
        bytes_in = sum(g.size for g in groups)
        if not groups or taken_files + files_in > max_files or taken_bytes + bytes_in > max_bytes:
            continue
        out += groups
        taken_files += files_in
        taken_bytes += bytes_in
    return out


def bin_packed(
    files: Sequence[DataFile], target_bytes: int, cluster: bool, in_order: Collection[str] = ()
) -> list[Group]:
    """The groups ``optimize`` rewrites: small files packed into bins of about the target size;
    with ``cluster``, also every partition whose files' key ranges overlap (all its files,
    sorted across them), but those of ``in_order``, known not to (read from the files where
    the journal's ranges could not tell: :func:`doubtful`)."""
    full = target_bytes * FULL_FRACTION
    out: list[Group] = []
    for partition, found in sorted(_by_partition(files).items()):
        if cluster and len(found) > 1 and partition not in in_order and _overlapping(found):
            size = sum(f.size for f in found)
            ordered = tuple(sorted(found, key=lambda f: f.path))
            out.append(Group(partition, ordered, max(1, math.ceil(size / target_bytes))))
            continue
        small = sorted((f for f in found if f.size < full), key=lambda f: (f.order, f.path))
        if cluster and partition not in in_order:
            small = _in_key_order(small)
        bin_: list[DataFile] = []
        for f in small:
            if bin_ and sum(b.size for b in bin_) + f.size > target_bytes:
                if len(bin_) > 1:
                    out.append(Group(partition, tuple(bin_), 1))
                bin_ = []
            bin_.append(f)
        if len(bin_) > 1:
            out.append(Group(partition, tuple(bin_), 1))
    return out


def _in_key_order(files: list[DataFile]) -> list[DataFile]:
    """``files`` by the low end of their key ranges, where the journal knows every one (a
    partition in key order packs neighbours only, so no packed file spans one left out); else
    as they came (optimize ranks a partition's files by key itself where it had to read them)."""
    if any(f.key_range is None or None in f.key_range for f in files):
        return files
    try:
        return sorted(files, key=lambda f: (_low(f), f.path))
    except TypeError:  # ranges of values that do not compare
        return files


def doubtful(files: Sequence[DataFile], key_columns: int) -> dict[str, list[DataFile]]:
    """The partitions (with their files) whose key ranges the journal cannot tell apart: it
    records the range of the first cluster column only, and only of some types (not of an ORC
    file, a timestamp, a double), so a partition whose ranges are unknown, or (with a key of
    several columns) touch, may be in key order all the same; optimize reads their keys to
    know, or it would rewrite a clustered partition again at every call."""
    out = {}
    for partition, found in _by_partition(files).items():
        if len(found) < 2 or not _overlapping(found):  # noqa: PLR2004 - one file cannot overlap
            continue
        unknown = any(f.key_range is None or None in f.key_range for f in found)
        if unknown or key_columns > 1:
            out[partition] = found
    return out


def _overlapping(files: Sequence[DataFile]) -> bool:
    """Whether some two files' key ranges overlap (a file without a known range overlaps)."""
    ranges = []
    for f in files:
        if f.key_range is None or None in f.key_range:
            return True
        ranges.append(f.key_range)
    try:
        ranges.sort()
        return any(ranges[i][0] <= ranges[i - 1][1] for i in range(1, len(ranges)))
    except TypeError:  # ranges of values that do not compare
        return True


def summary(groups: Sequence[Group]) -> dict[str, int]:
    """Counts a dry run and the entry's metrics report."""
    return {
        "groups": len(groups),
        "files": sum(len(g.files) for g in groups),
        "bytes": sum(g.size for g in groups),
        "outputs": sum(g.outputs for g in groups),
    }
