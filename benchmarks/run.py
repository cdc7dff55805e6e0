#!/usr/bin/env python3
"""Run a chosen set of benchmarks for N rounds and write their results: JSON, markdown, charts.

Each benchmark is one of the ``bench_*.py`` scripts next to this file, run as a process of its
own with ``--json FILE``; it measures ours against a peer in the same run, round by round, and
this runner keeps, for every ratio, the figure of each round and its min / median / max:

* ``sink``: a big batch through ``CdcSink`` (the JVM data path) against the do-it-yourself
  pipeline (consolidation + ``to_avro`` + Spark's Kafka sink), Spark's Kafka sink on the raw rows,
  and the floor (the consolidation to Spark's ``noop`` sink) — ``bench_sink.py``;
* ``shapes``: the same for every shape of input of issue 57 (wide, nested, many times,
  repeated rows, few keys, a new process's first batch of repeated rows), against the
  do-it-yourself pipeline and the floor — ``bench_shapes.py``;
* ``small``: small batches through ``CdcSink.write`` and as a ``foreachBatch`` function against
  ``to_avro`` + Spark's Kafka sink — ``bench_small_batches.py``;
* ``streaming``: a streaming query (the ``rate`` source, a 1-second trigger) through ``CdcSink``
  as its ``foreachBatch`` function against ``to_avro`` + Spark's Kafka sink: each micro-batch's
  ``triggerExecution``, and how soon a consumer has a row (ours: its time proven complete) —
  ``bench_streaming.py``;
* ``verify``: the verifying consumer against a plain consume-and-decode loop —
  ``bench_verify.py``;
* ``codec``: the CDC codec against fastavro with the full union schema — ``bench_codec.py``;
* ``read``: the readers of one topic: ``read_cdc`` against the local verifier, the ``cdcv2``
  streaming source against ``read_cdc`` (PySpark 4), and ``read_cdc`` on a standalone cluster of
  two one-core workers against one — ``bench_read.py``;
* ``freshness``: how soon a written time is in the Delta table ``apply_topic`` keeps, in
  trigger intervals — ``bench_freshness.py`` (PySpark 4; Delta's package is fetched by Spark).

Writes, under ``--out`` (``benchmarks/results``): ``latest.json`` (the run: date, commit, machine,
each benchmark's parameters, rounds and ratios), ``latest.md`` (the same as a table, with the
charts), ``charts/NAME.png`` (one chart per benchmark, from ``latest.json``), and one line per
run appended to ``history.jsonl``. A run of some benchmarks (``--only``) keeps the others' last
results in ``latest.json``, each with the date, commit and machine it was taken at.
``--charts-only`` makes ``latest.md`` and the charts again
from ``latest.json`` without running anything.

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or a broker started here with ``scripts/kafka-local`` for the
length of the run (its own state dir, stopped at the end); ``codec`` needs none.

    .venv/bin/python benchmarks/run.py --rounds 3
    .venv/bin/python benchmarks/run.py --only sink --rounds 5 --sink-rows 4000000
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from benchkit import kafka  # noqa: E402

BENCHMARKS = ("sink", "shapes", "small", "streaming", "verify", "codec", "read", "freshness")
NEEDS_KAFKA = {"sink", "shapes", "small", "streaming", "verify", "read", "freshness"}
TITLES = {
    "sink": "Sink, one big batch: input rows/s against the peers (higher is better)",
    "shapes": "Sink, one big batch of each shape of input: input rows/s\nagainst the "
    "do-it-yourself pipeline and the floor (higher is better)",
    "small": "Sink, small batches: seconds per batch against Spark's Kafka sink (lower is better)",
    "streaming": "Sink in a streaming query: a micro-batch's time and a row's latency against "
    "Spark's Kafka sink (lower is better)",
    "verify": "Verifying consumer: updates/s against a plain consume-and-decode loop "
    "(higher is better)",
    "codec": "Codec: updates/s against fastavro with the full union schema (higher is better)",
    "read": "Readers of one topic: updates/s against another reader (higher is better)",
    "freshness": "Apply: a time's latency from its write to its Delta commit, in trigger "
    "intervals (lower is better)",
}


def command(name: str, args: argparse.Namespace, rounds: int) -> list[str]:
    """The benchmark's command line (relative to the repository), without ``--json``."""
    if name == "sink":
        return [
            "benchmarks/bench_sink.py",
            "--rows",
            str(args.sink_rows),
            "--only",
            args.sink_pipelines,
            "--repeat",
            str(rounds),
        ]
    if name == "shapes":
        return [
            "benchmarks/bench_shapes.py",
            "--rows",
            str(args.shapes_rows),
            "--repeat",
            str(rounds),
            *(["--running"] if args.shapes_running else []),
        ]
    if name == "small":
        return [
            "benchmarks/bench_small_batches.py",
            "--rows",
            str(args.small_rows),
            "--batches",
            str(rounds),
            "--only",
            args.small_contenders,
        ]
    if name == "streaming":
        return [
            "benchmarks/bench_streaming.py",
            "--rows-per-second",
            str(args.streaming_rows),
            "--batches",
            str(args.streaming_batches),
            "--rounds",
            str(rounds),
        ]
    if name == "verify":
        return [
            "benchmarks/bench_verify.py",
            "--updates",
            str(args.verify_updates),
            "--shapes",
            args.verify_shapes,
            "--runs",
            str(rounds),
            "--memory",
            "--strict-memory",
            "0",
        ]
    if name == "read":
        return [
            "benchmarks/bench_read.py",
            "--updates",
            str(args.read_updates),
            "--engines",
            "local,spark,stream,cluster-1,cluster-2"
            if pyspark_major() >= 4
            else "local,spark,cluster-1,cluster-2",
            "--runs",
            str(rounds),
        ]
    if name == "freshness":
        return [
            "benchmarks/bench_freshness.py",
            "--rounds",
            str(rounds),
            "--interval",
            args.freshness_intervals,
        ]
    return [
        "benchmarks/bench_codec.py",
        "--updates",
        str(args.codec_updates),
        "--repeat",
        str(rounds),
    ]


def pyspark_major() -> int:
    """The installed PySpark's major version (the ``cdcv2`` source needs 4)."""
    try:
        return int(metadata.version("pyspark").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return 0


def git(*argv: str) -> str:
    done = subprocess.run(
        ["git", "--no-optional-locks", *argv], cwd=ROOT, capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def machine() -> dict:
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory = None

    def version(package: str) -> str | None:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    return {
        "cores": os.cpu_count(),
        "memory_gib": round(memory, 1) if memory else None,
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "pyspark": version("pyspark"),
        "confluent_kafka": version("confluent-kafka"),
        "fastavro": version("fastavro"),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
    }


def summarise(result: dict) -> dict:
    """The benchmark's ratios, each with min / median / max of its rounds recomputed here."""
    for r in result.get("ratios", []):
        values = r["per_round"]
        r["min"], r["median"], r["max"] = (
            (min(values), statistics.median(values), max(values)) if values else (None,) * 3
        )
        target = r.get("target")
        if target is None or r["median"] is None:
            r["median_meets_target"] = None
        elif r.get("better") == "lower":
            r["median_meets_target"] = r["median"] <= target
        else:
            r["median_meets_target"] = r["median"] >= target
    return result


def run_one(name: str, argv: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        out = Path(tmp) / f"{name}.json"
        print(f"== {name}: {shlex.join(argv)}", flush=True)
        began = time.perf_counter()
        done = subprocess.run([sys.executable, *argv, "--json", str(out)], cwd=ROOT)
        seconds = round(time.perf_counter() - began, 1)
        if done.returncode != 0 or not out.exists():
            print(f"== {name}: failed (exit code {done.returncode})", flush=True)
            return {"command": shlex.join(argv), "error": f"exit code {done.returncode}"}
        result = json.loads(out.read_text())
    result.pop("benchmark", None)
    result.get("parameters", {}).pop("json", None)  # a temporary file of this machine
    return {"command": shlex.join(argv), "wall_seconds": seconds, **summarise(result)}


def fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def target_text(r: dict) -> str:
    if r.get("target") is None:
        return "none"
    return f"{'≥' if r.get('better') != 'lower' else '≤'} {r['target']:g}×"


def taken(run: dict, result: dict) -> str:
    """When and at which commit a benchmark's result was taken (a carried-over one: its own)."""
    commit = result.get("commit", run["commit"])
    return f"{commit['hash']}{'+dirty' if commit['dirty'] else ''}, {result.get('date', run['date'])[:10]}"


def carried(last: dict, result: dict) -> dict:
    """A result of the last run's ``latest.json``, kept by a run that did not take it again: with
    its own date, commit and machine. One without a date of its own was taken in that run and
    gets the run's; one carried from an earlier run without a machine keeps none (unknown), not
    the last run's."""
    if "date" not in result:
        return {
            "date": last["date"],
            "commit": last["commit"],
            "machine": last.get("machine"),
            **result,
        }
    return {"machine": None, **result}


def machine_text(m: dict | None) -> str:
    if not m:
        return ""
    return (
        f" on {m['cores']} cores, {m['memory_gib']} GiB, PySpark {m['pyspark']}, load average at "
        f"the start {m['load_average_at_start']}"
    )


def write_markdown(run: dict, out: Path) -> None:
    commit = run["commit"]
    m = run["machine"]
    ran = ", ".join(
        n for n, r in run["benchmarks"].items() if r.get("date", run["date"]) == run["date"]
    )
    lines = [
        "# Benchmark results: the latest of each benchmark",
        "",
        "Written by `benchmarks/run.py` from `latest.json` — never by hand. The method and the",
        "targets are in [benchmarks/README.md](../README.md). A benchmark not in the last run keeps",
        'its last result: the table\'s "taken at" and each section say when and where it was taken.',
        "",
        f"The last run ({ran}):",
        "",
        f"- date: {run['date']}",
        f"- commit: `{commit['hash']}`"
        + (" (working tree with uncommitted changes)" if commit["dirty"] else ""),
        f"- command: `{run['command']}`",
        f"- machine: {m['cores']} cores, {m['memory_gib']} GiB, {m['system']}, Python {m['python']}, "
        f"PySpark {m['pyspark']}; load average at the start {m['load_average_at_start']}",
        "",
        "Each ratio is taken round by round (ours and the peer measured in the same round, "
        "interleaved); min / median / max over the rounds.",
        "",
        "| benchmark | taken at | ratio | ours | peer | rounds | min | median | max | target "
        "| median meets it |",
        "|---|---|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for name, result in run["benchmarks"].items():
        if "error" in result:
            lines.append(
                f"| {name} | {taken(run, result)} | failed: {result['error']} |" + " |" * 8
            )
            continue
        for r in result["ratios"]:
            meets = {True: "yes", False: "no", None: "–"}[r["median_meets_target"]]
            lines.append(
                f"| {name} | {taken(run, result)} | {r['name']} | {r['ours']} | {r['peer']} | {len(r['per_round'])} | "
                f"{fmt(r['min'])} | **{fmt(r['median'])}** | {fmt(r['max'])} | "
                f"{target_text(r)} | {meets} |"
            )
    for name, result in run["benchmarks"].items():
        lines += ["", f"## {name}", "", f"`{result['command']}`", ""]
        if "error" in result:
            lines.append(f"Failed: {result['error']}.")
            continue
        params = ", ".join(f"{k} {v}" for k, v in result.get("parameters", {}).items())
        lines += [f"Taken at {taken(run, result)}" + machine_text(result.get("machine")) + ".", ""]
        lines += [f"Parameters: {params}.", ""]
        if result.get("failed"):
            lines += [f"Failed, so not in the table: {', '.join(result['failed'])}.", ""]
        for r in result["ratios"]:
            rounds = ", ".join(f"{v:.2f}" for v in r["per_round"])
            lines.append(f"- {r['name']} ({r['meaning']}): rounds {rounds}")
        if (out / "charts" / f"{name}.png").exists():
            lines += ["", f"![{name}](charts/{name}.png)"]
    (out / "latest.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_charts(run: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts = out / "charts"
    charts.mkdir(parents=True, exist_ok=True)
    for name, result in run["benchmarks"].items():
        ratios = [r for r in result.get("ratios", []) if r["per_round"]]
        if not ratios:  # failed: no chart of an earlier run beside its failure
            (charts / f"{name}.png").unlink(missing_ok=True)
            continue
        fig, ax = plt.subplots(figsize=(9, 1.2 + 0.9 * len(ratios)), dpi=110)
        for y, r in enumerate(ratios):
            ax.plot([r["min"], r["max"]], [y, y], color="tab:blue", linewidth=3, alpha=0.5)
            ax.scatter(r["per_round"], [y] * len(r["per_round"]), color="tab:gray", s=18, zorder=3)
            ax.scatter([r["median"]], [y], color="tab:blue", s=90, marker="D", zorder=4)
            ax.annotate(
                f"{r['median']:.2f}× ({r['min']:.2f}–{r['max']:.2f})",
                (r["median"], y),
                xytext=(0, 9),
                textcoords="offset points",
                ha="center",
                fontsize=9,
                zorder=6,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
            )
            if r.get("target") is not None:
                ax.plot(
                    [r["target"]] * 2, [y - 0.35, y + 0.35], color="tab:red", linewidth=2, zorder=5
                )
        ax.axvline(1.0, color="black", linestyle=":", linewidth=1)
        ax.set_yticks(range(len(ratios)))
        ax.set_yticklabels(
            [
                f"{r['name']}\n"
                + (f"(target {target_text(r)})" if r.get("target") else "(no target)")
                for r in ratios
            ],
            fontsize=9,
        )
        ax.set_ylim(len(ratios) - 0.3, -0.7)  # the first ratio on top
        ax.set_xlim(left=0)
        ax.set_xlabel("ratio to the peer, round by round (×)")
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(
            f"{TITLES.get(name, name)}\n{taken(run, result)}: "
            f"dots rounds, diamond median, bar min–max, red target, dotted 1×",
            fontsize=9,
        )
        fig.tight_layout()
        fig.savefig(charts / f"{name}.png")
        plt.close(fig)


def history_line(run: dict, ran: list[str]) -> dict:
    """The run's line in ``history.jsonl``: the benchmarks run now, not those carried over."""
    results = {name: run["benchmarks"][name] for name in ran}
    return {
        "date": run["date"],
        "commit": run["commit"]["hash"],
        "dirty": run["commit"]["dirty"],
        "command": run["command"],
        "ratios": {
            f"{name}: {r['name']}": {k: r[k] for k in ("min", "median", "max", "target")}
            for name, result in results.items()
            for r in result.get("ratios", [])
        },
        "failed": [name for name, result in results.items() if "error" in result],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--only",
        default=",".join(BENCHMARKS),
        help=f"comma list of benchmarks among {','.join(BENCHMARKS)} (default: all)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every benchmark")
    ap.add_argument("--small-rounds", type=int, default=None, help="small: rounds (batches)")
    ap.add_argument("--sink-rows", type=int, default=2_000_000)
    ap.add_argument(
        "--sink-pipelines",
        default="jvm,diy,raw,floor",
        help="sink: bench_sink.py --only (jvm,python,diy,raw,floor)",
    )
    ap.add_argument(
        "--shapes-rows",
        type=int,
        default=4_000_000,
        help="shapes: rows of each shape (the nested ones: a quarter)",
    )
    ap.add_argument(
        "--shapes-running",
        action="store_true",
        help="shapes: also through a running sink (bench_shapes.py --running)",
    )
    ap.add_argument("--small-rows", type=int, default=200)
    ap.add_argument(
        "--small-contenders",
        default="jvm,jvm-stream",
        help="small: bench_small_batches.py --only (jvm,jvm-stream,jvm-executors,python)",
    )
    ap.add_argument(
        "--streaming-rows", type=int, default=200, help="streaming: the rate source's rows/s"
    )
    ap.add_argument(
        "--streaming-batches", type=int, default=20, help="streaming: measured batches a round"
    )
    ap.add_argument("--verify-updates", type=int, default=1_000_000)
    ap.add_argument(
        "--verify-shapes",
        default="kv,wide,nested",
        help="row shapes of the verify benchmark's topics (bench_verify.py --shapes)",
    )
    ap.add_argument("--codec-updates", type=int, default=500_000)
    ap.add_argument(
        "--read-updates",
        type=int,
        default=20_000_000,
        help="read: updates on the topic; read_cdc's target is set at 20M, where Spark's fixed "
        "costs of a few seconds no longer decide the ratio",
    )
    ap.add_argument(
        "--freshness-intervals",
        default="1,5",
        help="freshness: trigger intervals in seconds, a comma list",
    )
    ap.add_argument("--out", default="benchmarks/results", help="results directory")
    ap.add_argument(
        "--charts-only",
        action="store_true",
        help="make latest.md and the charts again from latest.json; run nothing",
    )
    args = ap.parse_args()
    try:  # the charts come last: a missing matplotlib would otherwise be found after the runs
        import matplotlib  # noqa: F401
    except ImportError:
        ap.error(
            "matplotlib is missing (it draws the charts): pip install -c constraints.txt -e '.[bench]'"
        )
    out = Path(args.out)
    if not out.is_absolute():
        out = ROOT / out
    out.mkdir(parents=True, exist_ok=True)
    if args.charts_only:
        run = json.loads((out / "latest.json").read_text())
        write_charts(run, out)
        write_markdown(run, out)
        return 0
    chosen = [b.strip() for b in args.only.split(",") if b.strip()]
    unknown = [b for b in chosen if b not in BENCHMARKS]
    if unknown:
        ap.error(f"--only: unknown benchmarks {unknown} (choose among {','.join(BENCHMARKS)})")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    run = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": {
            "hash": git("rev-parse", "--short", "HEAD") or "unknown",
            # the runner's own results, left by an earlier run not yet committed, are not code
            "dirty": bool(
                git(
                    "status",
                    "--porcelain",
                    "--untracked-files=no",
                    "--",
                    ".",
                    ":!benchmarks/results",
                )
            ),
        },
        "command": shlex.join([".venv/bin/python", "benchmarks/run.py", *sys.argv[1:]]),
        "machine": machine(),
        "rounds": args.rounds,
        "benchmarks": {},
    }
    broker = kafka() if NEEDS_KAFKA & set(chosen) else contextlib.nullcontext("")
    with broker as bootstrap:
        if bootstrap:
            os.environ["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
        for name in chosen:
            rounds = args.small_rounds if name == "small" and args.small_rounds else args.rounds
            result = run_one(name, command(name, args, rounds))
            run["benchmarks"][name] = {
                "date": run["date"],
                "commit": run["commit"],
                "machine": machine(),
                **result,
            }

    previous = out / "latest.json"
    if previous.exists():  # the benchmarks not run now keep their last results
        last = json.loads(previous.read_text())
        kept = {
            name: carried(last, result)
            for name, result in last.get("benchmarks", {}).items()
            if name not in run["benchmarks"] and name in BENCHMARKS
        }
        run["benchmarks"] = {
            name: run["benchmarks"].get(name) or kept[name]
            for name in BENCHMARKS
            if name in run["benchmarks"] or name in kept
        }
    (out / "latest.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    write_charts(run, out)
    write_markdown(run, out)
    with open(out / "history.jsonl", "a", encoding="utf-8") as history:
        history.write(json.dumps(history_line(run, chosen)) + "\n")
    print((out / "latest.md").read_text(), flush=True)
    failed = [name for name in chosen if "error" in run["benchmarks"][name]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
