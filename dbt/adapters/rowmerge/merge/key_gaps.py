"""Which files may be written into one file without leaving a hole in its key range.

File skipping knows a file only by its range of a key column (:mod:`.filestats`): a source key
inside the range makes the file a candidate. A file written from files whose ranges leave a
gap between them spans the gap too, and if another file holds keys there, every later merge
that touches one of those keys finds both files candidates although one holds none of its
keys. The one-pass write (:func:`.scan.one_pass_applies`) then rewrites a file no clause
acts on and falls back to a scan: about twice the merge's cost (the aging benchmark's
scattered shape fell back in one merge of eight). Compaction (:mod:`.compaction`) and the
rewrite of touched files (:func:`.rewrite.write_changes`) both write one file from several;
both ask here which may go together.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate
from typing import Any

Span = tuple[Any, Any]  # a file's (lowest, highest) key


def gaps(spans: Iterable[Span]) -> list[Span]:
    """The open intervals between ``spans`` that none of them covers, lowest first: the holes
    in the range of a file written from all of them."""
    out: list[Span] = []
    reach: Any = None
    for low, high in sorted(spans, key=lambda s: (s[0], s[1])):
        if reach is not None and low > reach:
            out.append((reach, low))
        reach = high if reach is None else max(reach, high)
    return out


class Others:
    """The ranges of the files left out of a write, searchable for keys in a gap."""

    def __init__(self, spans: Iterable[Span]):
        self._spans = sorted(spans, key=lambda s: (s[0], s[1]))
        self._lows = [low for low, _ in self._spans]
        # the highest key of the files up to each position (lows ascending)
        self._reach = list(accumulate((high for _, high in self._spans), max))

    def hold_keys_in(self, gap: Span, written: Span) -> bool:
        """Whether a file holds keys strictly inside ``gap`` of a file written over ``written``
        (its lowest and highest key): its range starts below the gap's upper end and ends
        above its lower one.

        A file whose range covers all of ``written`` does not count: it is a candidate for
        every key the written file could hold anyway (the unsorted file a table was created
        from spans every key), so it is no reason to keep files apart, and waiting for it to
        go would keep them apart for good."""
        low, high = gap
        first, last = written
        # files starting below the gap's upper end, nearest first, while some of them (or one
        # before them) still reaches above the gap's lower end
        i = bisect_left(self._lows, high) - 1
        while i >= 0 and self._reach[i] > low:
            o_low, o_high = self._spans[i]
            if o_high > low and not (o_low <= first and o_high >= last):
                return True
            i -= 1
        return False


def rewrite_groups(
    touched: Sequence[str], spans: Mapping[str, Span | None], folder_of: Callable[[str], str]
) -> list[list[str]]:
    """``touched`` (paths) in groups whose files a task may read together: within one folder
    (partition), files that follow each other in key order with no other file of the folder
    holding keys between them. Files from different folders may share a group (a task writes
    a file per partition); files without a known range go together in a group of their own.
    One group when nothing needs keeping apart (every path may share a task), as before.

    ``spans``: the key range of every file of the table (paths as in ``touched``)."""
    touched_set = set(touched)
    by_folder: dict[str, list[str]] = {}
    segments: dict[str, list[list[str]]] = {}
    unknown: list[str] = []
    for path in touched:
        if _known(spans.get(path)):
            by_folder.setdefault(folder_of(path), []).append(path)
        else:
            unknown.append(path)
    others_of: dict[str, list[Span]] = {}
    for path, span in spans.items():
        if path not in touched_set and _known(span):
            others_of.setdefault(folder_of(path), []).append(span)  # type: ignore[arg-type]
    for folder, paths in by_folder.items():
        others = Others(others_of.get(folder, ()))
        ordered = sorted(paths, key=lambda p: (spans[p], p))  # type: ignore[arg-type,return-value]
        runs: list[list[str]] = [[ordered[0]]]
        start, reach = spans[ordered[0]]  # type: ignore[misc]
        for path in ordered[1:]:
            low, high = spans[path]  # type: ignore[misc]
            if low > reach and others.hold_keys_in((reach, low), (start, max(reach, high))):
                runs.append([])
                start = low
            runs[-1].append(path)
            reach = max(reach, high)
        segments[folder] = runs
    # the k-th run of every folder in the k-th group
    groups: list[list[str]] = []
    for runs in segments.values():
        for k, run in enumerate(runs):
            if k == len(groups):
                groups.append([])
            groups[k].extend(run)
    if unknown:
        groups.append(unknown)
    return groups or [list(touched)]


def _known(span: Span | None) -> bool:
    return span is not None and None not in span
