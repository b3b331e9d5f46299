#!/usr/bin/env python3
"""Plots of a `versus` (or `load`) JSON report: throughput against clients, and the
latency CDFs of the write runs, one panel per client count.

usage: plot.py REPORT.json OUT_DIR
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"engram": "#1f77b4", "etcd": "#d62728"}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    doc = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    rows = doc["rows"]
    machine = doc["machine"]
    subtitle = f'{machine["cores"]} cores, {machine["cpu_model"]}, 3 nodes each on loopback, fsync on'

    # 1. Throughput against clients, one panel per workload that ran at several client counts.
    series = defaultdict(lambda: defaultdict(list))
    for r in rows:
        series[r["label"]][r["system"]].append((r["clients"], r["throughput_per_s"]))
    labels = [l for l, by in series.items() if any(len(v) > 1 for v in by.values())]
    if labels:
        cols = min(len(labels), 3)
        nrows = (len(labels) + cols - 1) // cols
        fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 4.2 * nrows), squeeze=False)
        for ax in axes.flat[len(labels):]:
            ax.set_visible(False)
        for ax, label in zip(axes.flat, labels):
            for system, pts in series[label].items():
                pts.sort()
                ax.plot([c for c, _ in pts], [t for _, t in pts], marker="o",
                        label=system, color=COLOURS.get(system))
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent clients")
            ax.set_ylabel("operations / s")
            ax.set_title(label)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        fig.suptitle(f"Throughput against clients ({subtitle})", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "bench-throughput.png", dpi=110)
        plt.close(fig)

    # 2. Latency CDFs of the write runs: the round with the median throughput of each point.
    ms = doc["report"]["measurements"]
    writes = [m for m in ms if m["workload"]["kind"] == "write"]
    if writes:
        first = writes[0]["workload"]
        writes = [m for m in writes if m["workload"] == first]
        clients = sorted({m["clients"] for m in writes})
        cols = min(len(clients), 4)
        fig, axes = plt.subplots(1, cols, figsize=(4.6 * cols, 4.0), squeeze=False)
        for ax, c in zip(axes[0], clients[:cols]):
            by_system = defaultdict(list)
            for m in writes:
                if m["clients"] == c:
                    by_system[m["system"]].append(m)
            for system, runs in by_system.items():
                runs.sort(key=lambda m: m["throughput_per_s"])
                m = runs[len(runs) // 2]
                qs = [q for q, _ in m["latency"]["cdf"]]
                lat_ms = [us / 1000 for _, us in m["latency"]["cdf"]]
                ax.plot(lat_ms, qs, label=system, color=COLOURS.get(system))
            ax.set_xscale("log")
            ax.set_xlabel("latency (ms, log)")
            ax.set_ylabel("fraction of requests")
            ax.set_title(f'write {first["datoms"]}x{first["value_bytes"]}B, {c} clients')
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(loc="lower right")
        fig.suptitle(f"Write latency CDFs ({subtitle})", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "bench-latency-cdf.png", dpi=110)
        plt.close(fig)
    print(f"plots written to {out}")


if __name__ == "__main__":
    main()
