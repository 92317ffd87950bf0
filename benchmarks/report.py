"""Benchmark results as files: JSON (everything measured), a markdown table, and charts.

``results.json`` / ``results.md`` / ``chart.png`` for the cases (one small chart per case with
three bars: row_level_merge, full rewrite, delta-rs); ``scale.json`` / ``scale.md`` /
``scale.png`` for ``--scale``; ``sizes.json`` / ``sizes.md`` / ``sizes.png`` for ``--sizes`` (the
grid at several table sizes, each case's spread and whether it meets the size target). Ratios
are row_level_merge / peer, from the same run; the geometric means are over Delta Lake's 16
grid cases.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

SYSTEMS = ("row_level_merge", "full_rewrite", "delta_rs")
LABELS = {"row_level_merge": "row_level_merge", "full_rewrite": "full rewrite", "delta_rs": "delta-rs"}
COLORS = {"row_level_merge": "#1f77b4", "full_rewrite": "#7f7f7f", "delta_rs": "#ff7f0e"}


def seconds(record: dict[str, Any], system: str) -> float | None:
    return record["systems"].get(system, {}).get("seconds")


def ratio(record: dict[str, Any], peer: str) -> float | None:
    ours, theirs = seconds(record, "row_level_merge"), seconds(record, peer)
    if ours is None or not theirs:
        return None
    return ours / theirs


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def written(record: dict[str, Any], system: str) -> int | None:
    c = record["systems"].get(system, {}).get("counters") or {}
    if c.get("bytes_added") is None:
        return None
    return int(c["bytes_added"]) + int(c.get("change_bytes_added") or 0)


def _num(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _mb(x: int | None) -> str:
    return "—" if x is None else f"{x / 1e6:.1f}"


def case_line(record: dict[str, Any]) -> str:
    """One progress line per case."""
    times = ", ".join(f"{LABELS[s]} {_num(seconds(record, s))} s" for s in SYSTEMS)
    verdict = "same table" if record["identical"] else "FAILED: " + "; ".join(record["problems"])
    return f"{record['case']}: {times}; {verdict}"


def _files_rewritten(record: dict[str, Any]) -> str:
    s = record["systems"]["row_level_merge"]
    c, m = s.get("counters") or {}, s.get("metrics") or {}
    if c.get("files_removed") is None:
        return "—"
    return f"{c['files_removed']} of {m.get('numTargetFilesBeforeSkipping', record['files'])}"


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    grid = [r for r in records if r["group"] == "grid"]
    return {
        "grid_cases": len(grid),
        "geomean_row_level_merge_over_full_rewrite": geomean([ratio(r, "full_rewrite") or 0 for r in grid]),
        "geomean_row_level_merge_over_delta_rs": geomean([ratio(r, "delta_rs") or 0 for r in grid]),
        "failed": [r["case"] for r in records if not r["identical"]],
    }


def markdown(meta: dict[str, Any], records: list[dict[str, Any]]) -> str:
    summ = summary(records)
    lines = [
        f"Table of {meta['rows']:,} rows in {meta['files']} Parquet files (web_returns shape); "
        f"{meta['machine']}; Spark `{meta['master']}`, driver memory {meta['driver_memory']}; "
        f"deltalake {meta['versions'].get('deltalake')}; {meta['date']}; commit {meta['commit']}. "
        f"Seconds are the median of {meta['repeat']} run(s)"
        f"{_warmup(meta)}"
        ", each on a fresh copy; ratios are "
        f"row_level_merge / peer, same run. Whole run: {meta['duration_s'] / 60:.1f} min{_sittings(meta)}.",
        "",
        "| case | source rows | files rewritten | row_level_merge s | full rewrite s | delta-rs s "
        "| / full rewrite | / delta-rs | MB written (ours / full / delta-rs) | Spark jobs (ours / full) "
        "| same table |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in records:
        jobs = " / ".join(
            _num(r["systems"][s].get("spark_jobs"), 0) for s in ("row_level_merge", "full_rewrite")
        )
        mbs = " / ".join(_mb(written(r, s)) for s in SYSTEMS)
        lines.append(
            f"| {r['case']} | {r['source_rows']:,} | {_files_rewritten(r)} | "
            f"{_num(seconds(r, 'row_level_merge'))} | {_num(seconds(r, 'full_rewrite'))} | "
            f"{_num(seconds(r, 'delta_rs'))} | {_num(ratio(r, 'full_rewrite'), 3)} | "
            f"{_num(ratio(r, 'delta_rs'), 3)} | {mbs} | {jobs} | {'yes' if r['identical'] else '**NO**'} |"
        )
    if summ["grid_cases"]:
        lines.append(
            f"| **geometric mean, {summ['grid_cases']} grid cases** | | | | | | "
            f"**{_num(summ['geomean_row_level_merge_over_full_rewrite'], 3)}** | "
            f"**{_num(summ['geomean_row_level_merge_over_delta_rs'], 3)}** | | | |"
        )
    lines += ["", *phase_table(records), "", "Cases:", ""]
    for r in records:
        name = f" (Delta: `{r['delta_name']}`)" if r["delta_name"] else ""
        lines.append(f"- `{r['case']}` [{r['group']}]{name}: {r['description']}")
    if summ["failed"]:
        lines += ["", f"**FAILED: {', '.join(summ['failed'])}**"]
        for r in records:
            for p in r["problems"]:
                lines.append(f"- {r['case']}: {p}")
    return "\n".join(lines) + "\n"


def phase_table(records: list[dict[str, Any]]) -> list[str]:
    """Where the time went: row_level_merge's phase timers and delta-rs's, plus memory and reads.

    Peak RSS is the working process's: the Spark JVM for row_level_merge and the full rewrite,
    the Python process for delta-rs. Reads are read() bytes of both processes; py4j calls the
    commands our engine sent to the JVM (measure.py).
    """
    phases = ("materializeSourceTimeMs", "scanTimeMs", "rewriteTimeMs", "commitTimeMs")
    lines = [
        "Time per phase (ms, medians) and resources:",
        "",
        "| case | ours: source / scan / rewrite / commit / other | delta-rs: scan / rewrite / other "
        "| ours: apply window ms | peak RSS MB (ours JVM / full JVM / delta-rs Python) "
        "| MB read (ours / full / delta-rs) | ours: py4j calls |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        ours, theirs = r["systems"]["row_level_merge"], r["systems"]["delta_rs"]
        cell_ours = cell_theirs = "—"
        if ours.get("seconds") is not None:
            p = ours.get("phases_ms", {})
            other = round(ours["seconds"] * 1000) - sum(p.get(k, 0) for k in phases)
            cell_ours = " / ".join(str(p.get(k, 0)) for k in phases) + f" / {other}"
        if theirs.get("seconds") is not None:
            p = theirs.get("phases_ms", {})
            other = round(theirs["seconds"] * 1000) - p.get("scan_time_ms", 0) - p.get("rewrite_time_ms", 0)
            cell_theirs = f"{p.get('scan_time_ms', 0)} / {p.get('rewrite_time_ms', 0)} / {other}"
        rss = " / ".join(
            _num(r["systems"][s].get("peak_rss_mb", {}).get(proc), 0)
            for s, proc in (("row_level_merge", "jvm"), ("full_rewrite", "jvm"), ("delta_rs", "python"))
        )
        reads = " / ".join(_mb(r["systems"][s].get("read_bytes")) for s in SYSTEMS)
        window = (ours.get("metrics") or {}).get("applyWindowMs")
        calls = _num(ours.get("py4j_calls"), 0)  # absent from results of runs before it was measured
        lines.append(
            f"| {r['case']} | {cell_ours} | {cell_theirs} | {_num(window, 0)} | {rss} | {reads} | {calls} |"
        )
    return lines


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart")
        return None
    return plt


def chart(path: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Small multiples: per case, the three systems' median seconds."""
    plt = _pyplot()
    if plt is None or not records:
        return
    cols = min(6, len(records))
    rows = math.ceil(len(records) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.3 * cols, 2.1 * rows + 0.6), squeeze=False)
    for ax, r in zip(axes.flat, records, strict=False):
        values = [seconds(r, s) or 0.0 for s in SYSTEMS]
        ax.bar(range(3), values, color=[COLORS[s] for s in SYSTEMS])
        ax.set_xticks([])
        ax.tick_params(labelsize=7)
        title = r["case"] if r["identical"] else f"{r['case']}\nMISMATCH"
        ax.set_title(title, fontsize=7, color="black" if r["identical"] else "red")
    for ax in list(axes.flat)[len(records) :]:
        ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[s]) for s in SYSTEMS]
    fig.legend(handles, [LABELS[s] for s in SYSTEMS], loc="upper center", ncol=3, fontsize=8)
    fig.suptitle(
        f"seconds per merge, {meta['rows']:,} rows in {meta['files']} files ({meta['machine']})",
        fontsize=8,
        y=0.005,
        va="bottom",
    )
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _sittings(meta: dict[str, Any]) -> str:
    """How many sittings a resumed run took (benchmarks/progress.py), if more than one."""
    n = meta.get("sittings", 1)
    return f" in {n} sittings" if n > 1 else ""


def _warmup(meta: dict[str, Any]) -> str:
    if not meta["warmup"]:
        return ""
    each = " of each sitting" if meta.get("sittings", 1) > 1 else ""
    return f" (one warm-up run of every system before the first case{each})"


def write_results(out: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "summary": summary(records), "cases": records}
    (out / "results.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (out / "results.md").write_text(markdown(meta, records))
    chart(out / "chart.png", meta, records)


def scale_markdown(meta: dict[str, Any], records: list[dict[str, Any]]) -> str:
    lines = [
        f"Scale curve: one run per point (a warm-up before the first), file size kept at "
        f"{meta['rows'] / meta['files']:,.0f} rows per file; {meta['machine']}; Spark `{meta['master']}`; "
        f"{meta['date']}; commit {meta['commit']}. "
        f"Whole run: {meta['duration_s'] / 60:.1f} min{_sittings(meta)}.",
        "",
        "| case | rows | files | row_level_merge s | full rewrite s | delta-rs s | / full rewrite "
        "| / delta-rs | same table |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['case']} | {r['rows']:,} | {r['files']} | {_num(seconds(r, 'row_level_merge'))} | "
            f"{_num(seconds(r, 'full_rewrite'))} | {_num(seconds(r, 'delta_rs'))} | "
            f"{_num(ratio(r, 'full_rewrite'), 3)} | {_num(ratio(r, 'delta_rs'), 3)} | "
            f"{'yes' if r['identical'] else '**NO**'} |"
        )
    return "\n".join(lines) + "\n"


def scale_chart(path: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> None:
    plt = _pyplot()
    if plt is None or not records:
        return
    names = list(dict.fromkeys(r["case"] for r in records))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        points = sorted((r for r in records if r["case"] == name), key=lambda r: r["rows"])
        for s in SYSTEMS:
            xs = [r["rows"] for r in points if seconds(r, s) is not None]
            ys = [seconds(r, s) for r in points if seconds(r, s) is not None]
            ax.plot(xs, ys, marker="o", color=COLORS[s], label=LABELS[s])
        ax.set_xscale("log")
        ax.set_xlabel("table rows", fontsize=8)
        ax.set_ylabel("seconds", fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# Issue 32's bound at every size: a case may cost the full rewrite's time plus 5%, plus a
# quarter second of fixed work (what a merge does that a rewrite does not: lock, journal).
REWRITE_FACTOR, FIXED_ALLOWANCE_S = 1.05, 0.25


def spread(record: dict[str, Any], system: str) -> str:
    """A system's timed runs as ``min–max`` seconds."""
    runs = record["systems"].get(system, {}).get("seconds_all") or []
    return f"{min(runs):.2f}–{max(runs):.2f}" if runs else "—"


def within_size_target(record: dict[str, Any]) -> bool | None:
    ours, rewrite = seconds(record, "row_level_merge"), seconds(record, "full_rewrite")
    if ours is None or rewrite is None:
        return None
    return ours <= REWRITE_FACTOR * rewrite + FIXED_ALLOWANCE_S


def sizes_markdown(meta: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """One table per table size: medians with their spread, ratios, and the size target."""
    lines = [
        f"The grid at {len({r['rows'] for r in records})} table sizes; {meta['machine']}; Spark "
        f"`{meta['master']}`; deltalake {meta['versions'].get('deltalake')}; {meta['date']}; commit "
        f"{meta['commit']}. Seconds are the median of {meta['repeat']} runs (min–max beside it), the "
        "three systems interleaved within each repetition, each on a fresh copy of the same files. "
        f"Target: row_level_merge ≤ {REWRITE_FACTOR}× the full rewrite + {FIXED_ALLOWANCE_S} s. "
        f"Whole run: {meta['duration_s'] / 60:.1f} min{_sittings(meta)}"
        + (
            f" (the {', '.join(f'{n:,}' for n in meta['sizes_from']['rows'])}-row grid is taken from "
            f"`{meta['sizes_from']['path']}`, a run of the same commit, and not counted here)."
            if meta.get("sizes_from")
            else "."
        ),
    ]
    for rows in sorted({r["rows"] for r in records}):
        at = [r for r in records if r["rows"] == rows]
        summ = summary(at)
        met = [within_size_target(r) for r in at]
        lines += [
            "",
            f"**{rows:,} rows in {at[0]['files']} files ({at[0]['table_bytes'] / 1e6:.0f} MB)**: "
            f"{sum(1 for m in met if m)} of {len(at)} cases within the target; geometric mean "
            f"{_num(summ['geomean_row_level_merge_over_full_rewrite'], 3)}× the full rewrite, "
            f"{_num(summ['geomean_row_level_merge_over_delta_rs'], 3)}× delta-rs.",
            "",
            "| case | row_level_merge s | full rewrite s | delta-rs s | / full rewrite | / delta-rs "
            "| within target | single task | Spark jobs | py4j calls | same table |",
            "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|",
        ]
        for r, ok in zip(at, met, strict=True):
            ours = r["systems"]["row_level_merge"]
            m = ours.get("metrics") or {}
            cells = [
                f"{_num(seconds(r, s))} ({spread(r, s)})"
                for s in ("row_level_merge", "full_rewrite", "delta_rs")
            ]
            lines.append(
                f"| {r['case']} | {' | '.join(cells)} | {_num(ratio(r, 'full_rewrite'), 3)} | "
                f"{_num(ratio(r, 'delta_rs'), 3)} | {'—' if ok is None else 'yes' if ok else '**no**'} | "
                f"{m.get('onePassSingleTask', '—')} | {_num(ours.get('spark_jobs'), 0)} | "
                f"{_num(m.get('numPy4jCalls'), 0)} | {'yes' if r['identical'] else '**NO**'} |"
            )
    return "\n".join(lines) + "\n"


def sizes_chart(path: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """row_level_merge / full rewrite per grid case, one bar per table size, and a line at 1.0
    (the rewrite's own time)."""
    plt = _pyplot()
    if plt is None or not records:
        return
    sizes = sorted({r["rows"] for r in records})
    names = list(dict.fromkeys(r["case"] for r in records))
    fig, ax = plt.subplots(figsize=(max(8.0, 0.7 * len(names)), 4.0))
    width = 0.8 / len(sizes)
    for k, rows in enumerate(sizes):
        by_name = {r["case"]: r for r in records if r["rows"] == rows}
        ys = [ratio(by_name[n], "full_rewrite") or 0 if n in by_name else 0 for n in names]
        ax.bar([i + k * width for i in range(len(names))], ys, width, label=f"{rows / 1e6:g}M rows")
    ax.axhline(1.0, color="#7f7f7f", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))])
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("row_level_merge / full rewrite", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_sizes(out: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "cases": records}
    (out / "sizes.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (out / "sizes.md").write_text(sizes_markdown(meta, records))
    sizes_chart(out / "sizes.png", meta, records)


def write_scale(out: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(
        json.dumps({"meta": meta, "points": records}, indent=1, default=str) + "\n"
    )
    (out / "scale.md").write_text(scale_markdown(meta, records))
    scale_chart(out / "scale.png", meta, records)
