#!/usr/bin/env python3
"""The sink on every shape of input of issue 57: ``bench_sink.py`` once per shape, each in a
process of its own, the JVM data path against the do-it-yourself pipeline and the floor.

Shapes (``--rows`` rows, 4M by default; nested ones a quarter of that, as the issue measured
them):

* ``narrow``: ``(k long, v string)``, every row distinct, one time (the case the sink was
  built around);
* ``wide``: six everyday columns (long, 40-character string, double, int, timestamp, boolean);
* ``nested``: decimal, date, a nullable string, an array and a struct;
* ``nested-10-times``: the same carrying 10 times (``t`` column, the sink in column mode);
* ``many-times``: narrow rows carrying a million times (a quarter of the rows);
* ``repeated``: each row 4 times (a quarter of the rows as distinct keys);
* ``few-keys``: 40,000 distinct keys;
* ``repeated-first``: each row 4 times in a new process's first batch on a new topic
  (``--cold``: what the process learnt of the layout forgotten before each round);
* ``repeated-restart``, ``few-keys-restart``: the same inputs as ``repeated`` and ``few-keys``
  in a new process's first batch on a topic that already holds one (``--restart``): a
  scheduled job's, a restarted query's, a second export's.

Each shape's sink is a new one every round (a first batch, in a process that learnt the layout
in its warm-up) unless said; ``--running`` also measures each shape through one sink whose
earlier batch was of the same input (``--same-sink``: a streaming query's later batches).

Targets (issue 57): ours at least 1.0× the do-it-yourself pipeline and at least 0.7× the
floor on every shape, 0.85× the floor on the narrow one.

Kafka: ``KAFKA_BOOTSTRAP_SERVERS``, or one broker started here for every shape.

    .venv/bin/python benchmarks/bench_shapes.py --rows 4000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchkit  # noqa: E402

#: name -> (bench_sink.py arguments for ``rows``, the floor's target)
SHAPES = {
    "narrow": (lambda rows: ["--rows", str(rows)], 0.85),
    "wide": (lambda rows: ["--rows", str(rows), "--shape", "wide"], 0.7),
    "nested": (lambda rows: ["--rows", str(rows // 4), "--shape", "nested"], 0.7),
    "nested-10-times": (
        lambda rows: ["--rows", str(rows // 4), "--shape", "nested", "--times", "10"],
        0.7,
    ),
    "many-times": (lambda rows: ["--rows", str(rows), "--times", str(rows // 4)], 0.7),
    "repeated": (lambda rows: ["--rows", str(rows), "--keys", str(rows // 4)], 0.7),
    "few-keys": (lambda rows: ["--rows", str(rows), "--keys", "40000"], 0.7),
    "repeated-first": (lambda rows: ["--rows", str(rows), "--keys", str(rows // 4), "--cold"], 0.7),
    "repeated-restart": (
        lambda rows: ["--rows", str(rows), "--keys", str(rows // 4), "--restart"],
        0.7,
    ),
    "few-keys-restart": (lambda rows: ["--rows", str(rows), "--keys", "40000", "--restart"], 0.7),
}
#: Shapes that are a new sink's first batch by their nature: not run through a running sink.
FIRST_ONLY = {"repeated-first", "repeated-restart", "few-keys-restart"}
DIY_TARGET = 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000, help="rows of the 4M shapes")
    ap.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"comma list among {','.join(SHAPES)} (default: all)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="rounds of each shape")
    ap.add_argument(
        "--running",
        action="store_true",
        help="also each shape through a running sink (bench_sink.py --same-sink)",
    )
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = ap.parse_args()
    chosen = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SHAPES]
    if unknown:
        ap.error(f"--shapes: unknown {unknown} (choose among {','.join(SHAPES)})")
    if args.rows < 40_000:
        ap.error(f"--rows {args.rows}: at least 40000 (the few-keys shape has 40,000 keys)")

    runs = [(shape, False) for shape in chosen]
    if args.running:
        runs += [(shape, True) for shape in chosen if shape not in FIRST_ONLY]
    ratios, parameters, failed = [], {}, []
    with benchkit.kafka() as servers, tempfile.TemporaryDirectory(prefix="cdc-shapes-") as tmp:
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": servers}
        for shape, running in runs:
            make, floor_target = SHAPES[shape]
            name = f"{shape} (running sink)" if running else shape
            argv = [
                sys.executable,
                str(HERE / "bench_sink.py"),
                *make(args.rows),
                "--only",
                "jvm,diy,floor",
                "--repeat",
                str(args.repeat),
                *(["--same-sink"] if running else []),
            ]
            out = Path(tmp) / "shape.json"
            out.unlink(missing_ok=True)
            print(f"== {name}: {' '.join(argv[1:])}", flush=True)
            done = subprocess.run([*argv, "--json", str(out)], env=env)
            if done.returncode != 0 or not out.exists():
                print(f"== {name}: failed (exit code {done.returncode})", flush=True)
                failed.append(name)
                continue
            result = json.loads(out.read_text())
            kept = result["parameters"]
            kept.pop("json", None)
            parameters[name] = "; ".join(
                f"{k} {kept[k]}"
                for k in ("shape", "rows", "keys", "times", "same_sink", "cold", "restart")
                if kept.get(k) not in (None, False)
                and not (k == "keys" and kept[k] == kept["rows"])
            )
            for r in result["ratios"]:
                peer = r["name"].split("/", 1)[1]
                if not r["name"].startswith("jvm/") or peer not in ("diy", "floor"):
                    continue
                ratios.append(
                    benchkit.ratio(
                        f"{name}: jvm/{peer}",
                        r["ours"],
                        r["peer"],
                        r["per_round"],
                        target=DIY_TARGET if peer == "diy" else floor_target,
                        meaning=r["meaning"],
                    )
                )
    for r in ratios:
        print(
            f"{r['name']:45s} min {r['min']:.2f}x median {r['median']:.2f}x max {r['max']:.2f}x "
            f"(target {r['target']:g}x)"
        )
    benchkit.write_json(
        args.json,
        "shapes",
        {"rounds": args.repeat, **parameters},
        [],
        ratios,
        failed=failed,
    )
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed and not ratios else 0  # the shapes measured are kept, the failed named


if __name__ == "__main__":
    sys.exit(main())
