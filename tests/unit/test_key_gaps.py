"""key_gaps: which files may be written into one without a hole in the key range."""

from __future__ import annotations

import posixpath

from dbt.adapters.rowmerge.merge.key_gaps import Others, gaps, rewrite_groups


def folder(path: str) -> str:
    return posixpath.dirname(path)


def test_gaps_are_the_stretches_no_span_covers() -> None:
    assert gaps([(0, 9), (20, 29), (5, 12)]) == [(12, 20)]
    assert gaps([(40, 49), (0, 9), (20, 29)]) == [(9, 20), (29, 40)]
    assert gaps([(0, 100), (10, 20), (50, 60)]) == []  # one span covers the others
    assert gaps([(0, 9), (9, 20)]) == []  # a shared bound is no gap
    assert gaps([]) == []


def test_others_hold_keys_in_a_gap_only_strictly_inside_it() -> None:
    others = Others([(30, 35), (100, 200)])
    written = (0, 1000)
    assert others.hold_keys_in((20, 40), written)
    assert others.hold_keys_in((34, 40), written)  # reaches in from below
    assert others.hold_keys_in((150, 300), written)  # reaches in from below, wide
    assert others.hold_keys_in((90, 110), written)  # reaches in from above
    assert not others.hold_keys_in((35, 100), written)  # touches both bounds, holds nothing inside
    assert not others.hold_keys_in((36, 99), written)
    assert not others.hold_keys_in((201, 900), written)
    assert not Others([]).hold_keys_in((0, 10), written)


def test_a_file_spanning_the_whole_written_range_is_no_reason() -> None:
    # the table's unsorted first file spans every key: it is a candidate for all of them anyway
    others = Others([(0, 10_000)])
    assert not others.hold_keys_in((49, 100), (0, 149))
    # one that covers only part of the written range does count
    assert Others([(60, 10_000)]).hold_keys_in((49, 100), (0, 149))
    assert Others([(60, 10_000), (0, 10_000)]).hold_keys_in((49, 100), (0, 149))


def test_touched_files_with_an_untouched_one_between_them_go_to_separate_tasks() -> None:
    spans = {f"/t/f{k}": (k * 100, k * 100 + 99) for k in range(6)}
    # f1 and f2 are neighbours; f4 is kept apart from them by f3, which is not rewritten
    groups = rewrite_groups(["/t/f4", "/t/f1", "/t/f2"], spans, folder)
    assert groups == [["/t/f1", "/t/f2"], ["/t/f4"]]
    # with f3 touched too, the four follow each other: one group, as before
    assert rewrite_groups(["/t/f1", "/t/f2", "/t/f3", "/t/f4"], spans, folder) == [
        ["/t/f1", "/t/f2", "/t/f3", "/t/f4"]
    ]


def test_files_of_random_keys_overlap_and_go_together() -> None:
    spans = {f"/t/r{k}": (k, 1000 - k) for k in range(5)}
    assert rewrite_groups(["/t/r0", "/t/r3"], spans, folder) == [["/t/r0", "/t/r3"]]


def test_partitions_are_apart_already_and_share_tasks() -> None:
    # in each partition two touched files with an untouched one between them: the first of
    # each partition goes in one group, the second of each in another
    spans = {}
    for day in ("d=1", "d=2"):
        for k in range(3):
            spans[f"/t/{day}/f{k}"] = (k * 10, k * 10 + 9)
    touched = ["/t/d=1/f0", "/t/d=1/f2", "/t/d=2/f0", "/t/d=2/f2"]
    assert rewrite_groups(touched, spans, folder) == [["/t/d=1/f0", "/t/d=2/f0"], ["/t/d=1/f2", "/t/d=2/f2"]]
    # a file of another partition in the gap is no reason
    spans = {"/t/d=1/a": (0, 9), "/t/d=1/b": (20, 29), "/t/d=2/c": (10, 19)}
    assert rewrite_groups(["/t/d=1/a", "/t/d=1/b"], spans, folder) == [["/t/d=1/a", "/t/d=1/b"]]


def test_files_without_a_range_go_together_apart_from_the_others() -> None:
    spans = {"/t/a": (0, 9), "/t/b": None, "/t/c": (None, 4), "/t/d": (20, 29)}
    assert rewrite_groups(["/t/a", "/t/b", "/t/c"], spans, folder) == [["/t/a"], ["/t/b", "/t/c"]]
    assert rewrite_groups(["/t/b"], spans, folder) == [["/t/b"]]
    # a file of no known range is never a reason to keep two apart
    assert rewrite_groups(["/t/a", "/t/d"], {"/t/a": (0, 9), "/t/d": (20, 29), "/t/x": None}, folder) == [
        ["/t/a", "/t/d"]
    ]


def test_a_wide_untouched_file_keeps_no_files_apart_but_one_reaching_into_the_gap_does() -> None:
    spans = {"/t/a": (0, 9), "/t/b": (20, 29), "/t/base": (0, 1000)}
    assert rewrite_groups(["/t/a", "/t/b"], spans, folder) == [["/t/a", "/t/b"]]
    spans["/t/late"] = (5, 15)  # keys 10-15 lie between a and b
    assert rewrite_groups(["/t/a", "/t/b"], spans, folder) == [["/t/a"], ["/t/b"]]


def test_many_files_are_grouped_in_key_order_whatever_the_order_given() -> None:
    spans = {f"/t/f{k:03d}": (k * 10, k * 10 + 9) for k in range(200)}
    touched = [f"/t/f{k:03d}" for k in (150, 3, 4, 5, 90, 91, 199)]
    assert rewrite_groups(touched, spans, folder) == [
        ["/t/f003", "/t/f004", "/t/f005"],
        ["/t/f090", "/t/f091"],
        ["/t/f150"],
        ["/t/f199"],
    ]
