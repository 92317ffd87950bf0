"""The compaction planner (compaction.py): which files merge, in what groups, and how many
files each group becomes — plain Python over a listing."""

from __future__ import annotations

import pytest

from dbt.adapters.rowmerge.merge.compaction import (
    DataFile,
    bin_packed,
    outputs,
    partition_of,
    settled,
    summary,
    tier,
    tiered,
)

KB, MB = 1024, 1024 * 1024
TARGET = 128 * MB


def files(sizes: list[int], partition: str = "", start: int = 0) -> list[DataFile]:
    return [
        DataFile(f"/t/{partition}/f{start + i:04d}", s, partition, order=start + i)
        for i, s in enumerate(sizes)
    ]


def test_tiers_are_eightfold_steps_of_a_2048th_of_the_target() -> None:
    assert [tier(s, TARGET) for s in (1, 50 * KB, 512 * KB)] == [0, 0, 0]
    assert [tier(s, TARGET) for s in (513 * KB, 4 * MB - 1, 4 * MB, 31 * MB, 32 * MB)] == [1, 1, 2, 2, 3]
    # a tiny target scales the tiers down with it
    assert tier(100, 10_000) == 1 and tier(30, 10_000) == 0


def test_a_tier_merges_once_it_holds_min_files_oldest_first() -> None:
    assert tiered(files([50 * KB] * 7), TARGET, 8, 64, 256 * MB) == []
    found = files([50 * KB] * 11)
    groups = tiered(found, TARGET, 8, 64, 256 * MB)
    assert [(g.partition, [f.path for f in g.files], g.outputs) for g in groups] == [
        ("", [f.path for f in found[:8]], 1)
    ]


def test_a_big_file_never_absorbs_small_ones() -> None:
    # 7 small files and one of 6 MB: different tiers, nothing is ready
    assert tiered(files([60 * KB] * 7 + [6 * MB]), TARGET, 8, 64, 256 * MB) == []
    # files at half the target or more are full and never rewritten
    assert tiered(files([64 * MB] * 9), TARGET, 8, 64, 1024 * MB) == []


def test_smallest_tiers_go_first_and_the_budget_leaves_the_rest_for_later() -> None:
    small = files([50 * KB] * 8, start=0)
    middle = files([1 * MB] * 8, start=100)
    groups = tiered(middle + small, TARGET, 8, 64, 256 * MB)
    assert [len(g.files) for g in groups] == [8, 8]
    assert groups[0].files == tuple(small)
    # a file budget of 10 takes only the first group
    assert [g.files for g in tiered(middle + small, TARGET, 8, 10, 256 * MB)] == [tuple(small)]
    # a byte budget of 1 MB takes only the small files
    assert [g.files for g in tiered(middle + small, TARGET, 8, 64, 1 * MB)] == [tuple(small)]


def test_groups_never_cross_partitions() -> None:
    a = files([50 * KB] * 5, "day=1")
    b = files([50 * KB] * 5, "day=2", start=10)
    assert tiered(a + b, TARGET, 8, 64, 256 * MB) == []
    c = files([50 * KB] * 8, "day=3", start=20)
    # runs of min_files: day=3 has two
    groups = tiered(a + b + c, TARGET, 4, 64, 256 * MB)
    assert [g.partition for g in groups] == ["day=1", "day=2", "day=3", "day=3"]


def test_idle_files_never_start_a_run_but_fill_one_a_written_file_starts() -> None:
    created = files([6 * MB] * 16)  # the table as it was created: 16 files of one tier
    idle = {f.path for f in created}
    assert tiered(created, TARGET, 8, 64, 256 * MB, idle) == []
    written = files([5 * MB], start=100)  # the first file merges wrote that reaches the tier
    groups = tiered(created + written, TARGET, 8, 64, 256 * MB, idle)
    # one run: the written file, then the oldest seven idle ones; the other nine wait
    assert [[f.path for f in g.files] for g in groups] == [[written[0].path] + sorted(idle)[:7]]
    # written files fill runs first; a run of idle files alone is never taken
    more = files([5 * MB] * 9, start=200)
    groups = tiered(created + more, TARGET, 8, 64, 256 * MB, idle)
    assert [[f.path in idle for f in g.files].count(True) for g in groups] == [0, 7]
    # without idle files the same tier is compacted at once
    assert len(tiered(created, TARGET, 8, 64, 256 * MB)) == 2


def test_a_settled_partition_packs_every_small_file_tiers_would_leave() -> None:
    # a day of hourly files after tiering: three of eight merged, and a full file
    day = files([700 * KB] * 3 + [90 * KB] * 2 + [64 * MB], "day=1")
    today = files([90 * KB] * 5, "day=2", start=10)
    assert tiered(day + today, TARGET, 8, 64, 256 * MB) == []  # no tier will ever fill
    groups = settled(day + today, ["day=1"], TARGET, 64, 256 * MB)
    # one file from day=1's five small ones; the full file and day=2 stay
    assert [(g.partition, len(g.files), g.outputs) for g in groups] == [("day=1", 5, 1)]
    assert settled(day + today, ["day=3"], TARGET, 64, 256 * MB) == []
    # a lone small file has nothing to pack with
    assert settled(files([90 * KB], "day=4"), ["day=4"], TARGET, 64, 256 * MB) == []


def test_settling_keeps_to_the_bounds_a_whole_partition_at_a_time() -> None:
    one = files([1 * MB] * 4, "day=1")
    two = files([1 * MB] * 4, "day=2", start=10)
    # six files per merge: day=1 fits, day=2 waits for the next merge
    assert [g.partition for g in settled(one + two, ["day=1", "day=2"], TARGET, 6, 256 * MB)] == ["day=1"]
    assert [g.partition for g in settled(one + two, ["day=1", "day=2"], TARGET, 64, 5 * MB)] == ["day=1"]
    assert settled(one + two, ["day=1", "day=2"], TARGET, 3, 256 * MB) == []


def test_bin_packing_fills_bins_to_the_target_and_skips_lone_files() -> None:
    found = files([40 * MB, 40 * MB, 40 * MB, 40 * MB, 70 * MB])
    groups = bin_packed(found, TARGET, cluster=False)
    # 70 MB is full (over half the target); 40+40+40 fits 128, the fourth 40 is alone: left
    assert [[f.size for f in g.files] for g in groups] == [[40 * MB] * 3]


def test_clustering_rewrites_a_partition_whose_key_ranges_overlap() -> None:
    overlapping = [
        DataFile("/t/a", 10 * MB, "", 0, (0, 100)),
        DataFile("/t/b", 10 * MB, "", 1, (50, 150)),
    ]
    disjoint = [DataFile("/t/c", 70 * MB, "", 0, (0, 10)), DataFile("/t/d", 70 * MB, "", 1, (11, 20))]
    assert [(len(g.files), g.outputs) for g in bin_packed(overlapping, 8 * MB, cluster=True)] == [(2, 3)]
    assert bin_packed(disjoint, TARGET, cluster=True) == []
    unknown = [DataFile("/t/e", 70 * MB, "", 0), DataFile("/t/f", 70 * MB, "", 1)]
    assert [len(g.files) for g in bin_packed(unknown, TARGET, cluster=True)] == [2]


@pytest.mark.parametrize("size, want", [(1, 1), (128 * MB, 1), (160 * MB, 1), (200 * MB, 2), (1024 * MB, 8)])
def test_outputs_are_about_the_target_size(size: int, want: int) -> None:
    assert outputs(size, TARGET) == want


def test_partition_of_a_path_and_the_summary() -> None:
    assert partition_of("file:/w/t/day=1/h=2/part-0.parquet", "file:/w/t") == "day=1/h=2"
    assert partition_of("file:/w/t/part-0.parquet", "file:/w/t/") == ""
    groups = tiered(files([50 * KB] * 8), TARGET, 8, 64, 256 * MB)
    assert summary(groups) == {"groups": 1, "files": 8, "bytes": 400 * KB, "outputs": 1}


def ranged(spans: list[tuple[int, int]], ages: list[int] | None = None) -> list[DataFile]:
    """Small files with these key ranges; ``ages``: their order (default: as listed)."""
    ages = ages if ages is not None else list(range(len(spans)))
    return [
        DataFile(f"/t/r{i:04d}", 50 * KB, "", order=age, key_range=span)
        for i, (span, age) in enumerate(zip(spans, ages, strict=True))
    ]


def test_with_key_ranges_a_tier_runs_in_key_order_not_age() -> None:
    # ten recent insert files, keys 0-99, 100-199, ...; the one of keys 200-299 was rewritten
    # by an update last, so it is the youngest: taken oldest first, the run would skip it and
    # its output's range (0-899) would hold a hole its keys fill
    spans = [(k * 100, k * 100 + 99) for k in range(10)]
    ages = [0, 1, 9, 2, 3, 4, 5, 6, 7, 8]
    found = ranged(spans, ages=ages)
    groups = tiered(found, TARGET, 8, 64, 256 * MB)
    assert [[f.key_range for f in g.files] for g in groups] == [spans[:8]]
    # without ranges, age decides (as before)
    aged = [DataFile(f.path, f.size, f.partition, order=f.order) for f in found]
    by_age = tiered(aged, TARGET, 8, 64, 256 * MB)
    assert [sorted(f.order for f in g.files) for g in by_age] == [list(range(8))]


def test_a_run_waits_while_a_file_left_out_lies_inside_its_range() -> None:
    # eight small files around a bigger one (another tier) whose keys lie between theirs
    small = ranged([(k * 100, k * 100 + 49) for k in range(8)])
    inside = DataFile("/t/big", 6 * MB, "", order=99, key_range=(350, 399))
    assert tiered([*small, inside], TARGET, 8, 64, 256 * MB) == []
    # a file whose range covers theirs (an unsorted first file spans every key) is no reason
    wide = DataFile("/t/wide", 6 * MB, "", order=99, key_range=(0, 10_000))
    assert [len(g.files) for g in tiered([*small, wide], TARGET, 8, 64, 256 * MB)] == [8]
    # nor one within a run file's own range (no gap of the run's holds its keys)
    within = DataFile("/t/within", 6 * MB, "", order=99, key_range=(310, 340))
    assert [len(g.files) for g in tiered([*small, within], TARGET, 8, 64, 256 * MB)] == [8]
    # but one reaching into a gap (keys 350-360 of it lie between 300-349 and 400-449) is
    across = DataFile("/t/across", 6 * MB, "", order=99, key_range=(320, 360))
    assert tiered([*small, across], TARGET, 8, 64, 256 * MB) == []
    # files of random keys each span most of the range: no gap, nothing waits
    shuffled = ranged([(k, 1000 - k) for k in range(8)])
    inner = DataFile("/t/inner", 6 * MB, "", order=99, key_range=(400, 600))
    assert [len(g.files) for g in tiered([*shuffled, inner], TARGET, 8, 64, 256 * MB)] == [8]
    # nor is one beyond them
    beyond = DataFile("/t/next", 6 * MB, "", order=99, key_range=(900, 999))
    assert [len(g.files) for g in tiered([*small, beyond], TARGET, 8, 64, 256 * MB)] == [8]


def test_a_file_without_a_known_range_keeps_the_tier_in_age_order() -> None:
    found = ranged([(k * 100, k * 100 + 99) for k in range(8)], ages=[7, 6, 5, 4, 3, 2, 1, 0])
    found.append(DataFile("/t/nulls", 50 * KB, "", order=8, key_range=(None, 5)))
    groups = tiered(found, TARGET, 8, 64, 256 * MB)
    assert [sorted(f.order for f in g.files) for g in groups] == [list(range(8))]
    assert "/t/nulls" not in {f.path for g in groups for f in g.files}


def test_a_file_left_out_of_the_compaction_still_counts_as_a_neighbour() -> None:
    # the merge's own files are never compacted right after it, but their ranges are there:
    # the rewritten file of keys 200-299 lies between eight others
    others = ranged([(k * 100, k * 100 + 99) for k in (0, 1, 3, 4, 5, 6, 7, 8)])
    rewritten = DataFile("/t/rewritten", 50 * KB, "", order=99, key_range=(200, 299))
    assert [len(g.files) for g in tiered(others, TARGET, 8, 64, 256 * MB)] == [8]
    assert tiered(others, TARGET, 8, 64, 256 * MB, neighbours=[*others, rewritten]) == []


def test_a_short_run_is_filled_with_the_idle_files_nearest_it_in_key_order() -> None:
    # the table's own small files of keys 0-2, 10-12, 20-22 and two written since (200, 300):
    # the run of three takes the idle file nearest them (20-22), which leaves no gap with a
    # file in it; the lowest (0-2) would have left 10-22 in its gap, and waited
    base = [DataFile(f"/t/base{k}", 50 * KB, "", order=0, key_range=(k, k + 2)) for k in (0, 10, 20)]
    written = ranged([(200, 200), (300, 300)])
    idle = {f.path for f in base}
    groups = tiered([*base, *written], TARGET, 3, 64, 256 * MB, idle)
    assert [sorted(f.key_range for f in g.files) for g in groups] == [[(20, 22), (200, 200), (300, 300)]]
    # a merge's own file between them (key 100) is a hole that makes the run wait
    own = DataFile("/t/own", 50 * KB, "", order=9, key_range=(100, 100))
    assert tiered([*base, *written], TARGET, 3, 64, 256 * MB, idle, [*base, *written, own]) == []
