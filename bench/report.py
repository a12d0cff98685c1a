"""The results table of `make bench`, from bench/results/latest.json, each target marked met or
missed with the measured ratio. bench/run.py writes it into docs/performance.md between the two
marker comments; on its own it prints the table for a results file:

    python bench/report.py [bench/results/latest.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

START = "<!-- bench-table:start (written by bench/run.py from bench/results/latest.json) -->"
END = "<!-- bench-table:end -->"

#: The targets the table marks met or missed, whatever the results file recorded when it was
#: measured (a part measured before a target changed is judged by today's target).
TARGETS = {
    "run_to_handwritten": 1.5,  # whole processes, every size
    "ingest_to_floor": 1.3,  # staging alone
    "apply_vs_stock_merge_spark": 1.2,
    "apply_vs_handwritten_postgres": 1.5,
    "postgres_daily": 1.0,  # a day's changes into a table holding every key, PostgreSQL
    "marginal_per_row": 1.3,  # runner run's cost per row from 10M to 20M rows, vs the job's
    "peak_heap": 1.0,  # runner run's peak JVM heap at 20M (and 50M) rows, vs the job's
    "many_small_files": 2.0,
    "snapshot_hash_vs_full_row": {"10": 1.0, "100": 0.6},  # by non-key columns
}
#: Whole-process sizes from this one up are measured once. The ratio at the largest measured
#: size must not exceed the ratio at 1M rows.
LARGEST = 20_000_000
HUGE = 50_000_000  # in the sizes `make bench` runs, once


def _s(seconds: float) -> str:
    return f"{seconds:.1f} s"


def _verdict(ratio: float, target: float | None) -> str:
    if target is None:
        return ""
    return f"{target:g}x, {'met' if ratio <= target else 'missed'}"


def _within(seconds: float, target: float) -> str:
    return f"{target:g} s, {'met' if seconds <= target else 'missed'}"


def _against_target(
    what: str, seconds: float, target: float, when: str
) -> tuple[str, str, str, str, str, str]:
    """A table row for a time with no baseline beside it, marked against its target."""
    return (what, _s(seconds), "", "", _within(seconds, target), when)


def rows(results: dict) -> list[tuple[str, str, str, str, str, str]]:
    """(benchmark, ours, baseline, ratio, target verdict, measured on) per line of the table."""
    on = results.get("measured_on", {})
    out = []
    whole = results.get("whole_process", {})
    for size in sorted(whole, key=int):
        p = whole[size]
        n = f"{int(size):,}"
        reps = p.get("repeats", results.get("repeat"))
        ratio = p["ratio_run_to_handwritten"]
        out.append(
            (
                f"`runner run` vs the hand-written Spark MERGE job, {n} rows "
                f"({reps} run{'s' if reps != 1 else ''})",
                _s(p["runner_run_s"]),
                _s(p["handwritten_s"]),
                f"{ratio:.2f}x",
                _verdict(ratio, TARGETS["run_to_handwritten"]),
                on.get(size, ""),
            )
        )
        if "ratio_ingest_to_floor" in p:
            ratio = p["ratio_ingest_to_floor"]
            out.append(
                (
                    f"`runner ingest` (staging) vs the floor (each row written once), {n} rows",
                    _s(p["runner_ingest_s"]),
                    _s(p["floor_s"]),
                    f"{ratio:.2f}x",
                    _verdict(ratio, TARGETS["ingest_to_floor"]),
                    on.get(size, ""),
                )
            )
    for size in sorted(whole, key=int):
        heap = whole[size].get("peak_heap_mib")
        if heap is None or int(size) < LARGEST:
            continue
        ours, theirs = heap["runner_run_mib"], heap["handwritten_mib"]
        out.append(
            (
                f"peak JVM heap in use (Spark's executor metrics, polled every 100 ms while tasks "
                f"run): `runner run` vs the hand-written job, {int(size):,} rows",
                f"{ours:,.0f} MiB",
                f"{theirs:,.0f} MiB",
                f"{ours / theirs:.2f}x",
                _verdict(ours / theirs, TARGETS["peak_heap"]),
                on.get(size, ""),
            )
        )
    steady = results.get("steady_state", {})
    for label in sorted(steady, key=lambda k: (steady[k]["keys"], steady[k]["changes"])):
        p = steady[label]
        ratio = p["ratio_run_to_handwritten"]
        out.append(
            (
                f"the daily run: {_rows(p['changes'])} changes in 10 Files into a table of "
                f"{_rows(p['keys'])} keys, `runner run` vs the hand-written MERGE job (median "
                f"of {p['days']} days)",
                _s(p["runner_run_s"]),
                _s(p["handwritten_s"]),
                f"{ratio:.2f}x",
                _verdict(ratio, p["target"]),
                on.get(label, ""),
            )
        )
    sizes = sorted(whole, key=int)
    if len(sizes) > 1 and "1000000" in whole and int(sizes[-1]) > 1_000_000:
        a = whole[sizes[-1]]["ratio_run_to_handwritten"]
        b = whole["1000000"]["ratio_run_to_handwritten"]
        out.append(
            (
                f"`runner run` vs the hand-written job: the ratio at {_rows(int(sizes[-1]))} vs at "
                "1M rows",
                f"{a:.2f}x",
                f"{b:.2f}x",
                f"{a / b:.2f}",
                f"no higher, {'met' if a <= b else 'missed'}",
                on.get(sizes[-1], ""),
            )
        )
    same_day = on.get("10000000") == on.get("20000000")  # absolute times compare within a day
    if "10000000" in whole and "20000000" in whole and same_day:
        ten, twenty = whole["10000000"], whole["20000000"]
        ours = (twenty["runner_run_s"] - ten["runner_run_s"]) / 10_000_000 * 1e6
        theirs = (twenty["handwritten_s"] - ten["handwritten_s"]) / 10_000_000 * 1e6
        out.append(
            (
                "`runner run` vs the hand-written job: the cost of each row from 10M to 20M "
                "rows (the slope), µs per row",
                f"{ours:.2f}",
                f"{theirs:.2f}",
                f"{ours / theirs:.2f}x",
                _verdict(ours / theirs, TARGETS["marginal_per_row"]),
                on.get("20000000", ""),
            )
        )
    if "one_big_file" in results:
        b = results["one_big_file"]
        out.append(
            (
                f"`runner ingest` of one {b['mib']:,} MiB File vs the same bytes in 20 Files",
                _s(b["one_file_s"]),
                _s(b["twenty_files_s"]),
                f"{b['ratio']:.2f}x",
                _verdict(b["ratio"], b.get("target")),
                on.get("one_big_file", ""),
            )
        )
    labels = {
        "apply_vs_stock_merge_spark": (
            "apply of the change Files of a {rows:,}-row scenario after its full load, local"
            " Spark, warm session: our apply vs dbt's stock `unique_key` merge (no deletes,"
            " no markers)",
            "cdc_apply_s",
            "stock_merge_s",
        ),
        "apply_vs_handwritten_postgres": (
            "same on PostgreSQL: our apply (a `dbt build`) vs hand-written"
            " `INSERT ... ON CONFLICT` + `DELETE`",
            "cdc_apply_s",
            "handwritten_s",
        ),
        "end_to_end": (
            "in one warm session, {rows:,} rows: ingest + `dbt build` vs a plain Spark write",
            "runner_run_s",
            "plain_spark_s",
        ),
        "many_small_files": (
            "staging {small_files:,} Files vs 1 File of {rows:,} rows",
            "small_s",
            "one_file_s",
        ),
    }
    for name, (label, ours, base) in labels.items():
        if name not in results:
            continue
        r = results[name]
        out.append(
            (
                label.format(**r),
                _s(r[ours]),
                _s(r[base]),
                f"{r['ratio']:.2f}x",
                _verdict(r["ratio"], TARGETS.get(name, r.get("target"))),
                on.get(name, ""),
            )
        )
    daily = results.get("apply_vs_handwritten_postgres", {}).get("daily")
    if daily:
        out.append(
            (
                f"the daily run on PostgreSQL: {_rows(daily['changes'])} changes in 10 Files"
                f" into a table of {_rows(daily['keys'])} keys, our apply (a `dbt build`) vs"
                " hand-written `INSERT ... ON CONFLICT` + `DELETE` on a table with a primary key",
                _s(daily["cdc_apply_s"]),
                _s(daily["handwritten_s"]),
                f"{daily['ratio']:.2f}x",
                _verdict(daily["ratio"], daily.get("target")),
                on.get("apply_vs_handwritten_postgres", ""),
            )
        )
    if "latency" in results:
        lat, when = results["latency"], on.get("latency", "")
        c, w, e = lat["cold_file"], lat["watch"], lat["entities"]
        out.append(
            (
                "latency: one new 100-row File, `runner run` as a cold process vs the"
                " hand-written Spark MERGE job as a cold process, sample entities applied",
                _s(c["runner_run_s"]),
                _s(c["handwritten_s"]),
                f"{c['ratio']:.2f}x",
                _verdict(c["ratio"], c.get("target")),
                when,
            )
        )
        out.append(
            _against_target(
                "latency: the same File through `runner run --watch` (warm), landing to marker",
                w["landing_to_marker_s"], w["target_s"], when,
            )
        )  # fmt: skip
        if "ten_files_s" in w:
            out.append(
                _against_target(
                    "latency: ten such Files landing together through the warm watch, landing"
                    " of the first to the marker of the last",
                    w["ten_files_s"], w["ten_files_target_s"], when,
                )
            )  # fmt: skip
        out.append(
            _against_target(
                "latency: `runner run` with nothing new (no JVM, no dbt), wall",
                c["noop_s"], c["noop_target_s"], when,
            )
        )  # fmt: skip
        if "noop_cpu_s" in c:
            out.append(
                _against_target(
                    "latency: `runner run` with nothing new, CPU (user + system)",
                    c["noop_cpu_s"], c["noop_cpu_target_s"], when,
                )
            )  # fmt: skip
        out.append(
            (
                "latency: one new File, cold `runner run`, 10 declared entities vs 1"
                f" (dbt nodes built: {e['dbt_nodes']['ten']:g} vs {e['dbt_nodes']['one']:g})",
                _s(e["ten_entities_s"]),
                _s(e["one_entity_s"]),
                f"{e['ratio']:.2f}x",
                _verdict(e["ratio"], e.get("target")),
                when,
            )
        )
    if "soak" in results:
        soak, when = results["soak"], on.get("soak", "")
        for side, label in (("with_maintenance", "with"), ("without_maintenance", "without")):
            if side not in soak:
                continue  # not measured yet
            r = soak[side]
            disk = r["on_disk"]
            first, last = disk[min(disk, key=int)], disk[max(disk, key=int)]
            every = f" every {r['maintain_every']} runs" if r["maintain_every"] else ""
            out.append(
                (
                    f"soak: {r['runs']} `runner run --watch` batches of one 10-row File, "
                    f"{label} `runner maintain`{every}: batch time at the end vs the start"
                    f" (files under the warehouse {first['data_files']} -> {last['data_files']},"
                    f" snapshots {first['snapshots']} -> {last['snapshots']})",
                    _s(r["end_s"]),
                    _s(r["start_s"]),
                    f"{r['end_to_start']:.2f}x",
                    _verdict(r["end_to_start"], soak["target"] if r["maintain_every"] else None),
                    when,
                )
            )
    if "growth" in results:
        g = results["growth"]
        sizes = sorted((k for k in g if k.isdigit()), key=int)
        last, prev = g.get("compared", [int(sizes[-1]), int(sizes[-2])])
        per_row = " / ".join(f"{g[k]['us_per_row']:.0f}" for k in sizes)
        out.append(
            (
                "growth, ingest + apply in one session: µs per row at "
                + " / ".join(_rows(int(k)) for k in sizes),
                per_row,
                "",
                f"{_rows(last)} vs {_rows(prev)}: {g['ratio_last_to_previous']:.2f}",
                _verdict(g["ratio_last_to_previous"], g.get("target")),
                on.get("growth", ""),
            )
        )
    if "snapshot_vs_dbt_snapshot" in results:
        s = results["snapshot_vs_dbt_snapshot"]
        out.append(
            (
                f"snapshot mode, {s['extracts']} daily extracts of {s['rows_per_extract']:,} rows,"
                " one `dbt build` / `dbt snapshot` per extract: history apply (validity from"
                " effective dates, process ids) vs dbt's snapshot (check all, hard deletes"
                f" invalidate); ours all in one run: {_s(s['history_apply_one_run_s'])}",
                _s(s["history_apply_s"]),
                _s(s["dbt_snapshot_s"]),
                f"{s['ratio']:.2f}x",
                "",
                on.get("snapshot_vs_dbt_snapshot", ""),
            )
        )
    if "snapshot_hash_vs_full_row" in results:
        w = results["snapshot_hash_vs_full_row"]
        widths = sorted((k for k in w if k.isdigit()), key=int)
        for k in widths:
            r = w[k]
            out.append(
                (
                    f"snapshot mode, apply of one full extract of {r['rows']:,} rows, {k} non-key"
                    " columns: by key and row hashes (nodes) vs a MERGE comparing every column",
                    _s(r["hash_apply_nodes_s"]),
                    _s(r["full_row_merge_s"]),
                    f"{r['ratio_nodes_to_full_row']:.2f}x",
                    _verdict(
                        r["ratio_nodes_to_full_row"], TARGETS["snapshot_hash_vs_full_row"].get(k)
                    ),
                    on.get("snapshot_hash_vs_full_row", ""),
                )
            )
        out.append(
            (
                f"snapshot mode, time at {widths[-1]} / at {widths[0]} non-key columns: hashes"
                " vs full-row MERGE",
                f"{w['growth_hash']:.2f}",
                f"{w['growth_full_row']:.2f}",
                "",
                "",
                on.get("snapshot_hash_vs_full_row", ""),
            )
        )
    if "ingest_memory" in results:
        m = results["ingest_memory"]
        peaks = m["peak_rss_mib"]
        out.append(
            (
                f"peak RSS of `runner ingest` on {m['input_mib']:,.0f} MiB of CSV"
                f" ({m['seconds']:.0f} s)",
                f"runner {peaks['runner_python']:.0f} MiB; Spark JVM {peaks['spark_jvm']:,.0f} MiB",
                "",
                "",
                f"runner under {m['target_mib']} MiB, "
                + ("met" if peaks["runner_python"] < m["target_mib"] else "missed"),
                on.get("ingest_memory", ""),
            )
        )
    if "hash_memory" in results:
        h = results["hash_memory"]
        out.append(
            (
                f"peak RSS hashing a {h['file_mib']:,} MiB File, over a bare interpreter",
                f"+{h['hashing_cost_mib']:.1f} MiB",
                f"whole-file read +{h['whole_file_read_cost_mib']:,.0f} MiB",
                "",
                "",
                on.get("hash_memory", ""),
            )
        )
    return out


def _rows(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def phases(results: dict) -> str:
    """One line per whole-process size: median seconds per phase of `runner run --json`."""
    lines = []
    for size, p in sorted(results.get("whole_process", {}).items(), key=lambda kv: int(kv[0])):
        ph = p.get("phases_s", {})
        if ph:
            parts = ", ".join(f"{k} {v:.1f} s" for k, v in ph.items())
            lines.append(f"- {int(size):,} rows: {parts}")
    return "\n".join(lines)


def table(results: dict) -> str:
    head = [
        "| benchmark | ours | baseline | ratio | target | measured |",
        "|---|---|---|---|---|---|",
    ]
    body = ["| " + " | ".join(r) + " |" for r in rows(results)]
    text = "\n".join(head + body)
    ph = phases(results)
    if ph:
        text += "\n\nTime per phase of `runner run` (medians, from `--json`):\n\n" + ph
    watch = results.get("latency", {}).get("watch", {}).get("phases_s")
    if watch:
        parts = ", ".join(f"{k} {v:.2f} s" for k, v in watch.items())
        text += (
            "\n\nOne new File through `runner run --watch`, landing to marker, per phase "
            "(medians; dbt's nodes run four at a time, so their times overlap): " + parts
        )
    return text


def plain(results: dict) -> str:
    lines = [f"{'ratio':>14}  {'target':<14} benchmark"]
    for name, _ours, _base, ratio, verdict, _on in rows(results):
        lines.append(f"{ratio:>14}  {verdict:<14} {name}")
    return "\n".join(lines)


def write_readme(readme: Path, text: str) -> None:
    """Replace what lies between the marker comments of ``readme`` with ``text``."""
    content = readme.read_text()
    if START not in content or END not in content:
        raise SystemExit(f"{readme}: no results table markers ({START} ... {END})")
    head, rest = content.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results/latest.json"
    print(table(json.loads(path.read_text())))
