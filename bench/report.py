"""Prints a benchmark run side by side, as ns per event and as ratios.

    pytest bench/ -o python_files='bench_*.py' --benchmark-disable-gc \
        --benchmark-json=bench.json
    python bench/report.py bench.json
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict


def main(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    table: dict[str, dict[str, float]] = defaultdict(dict)
    for bench in run["benchmarks"]:
        per_event = bench["extra_info"].get("ns_per_event_median")
        if per_event is None:
            continue
        name = bench["name"]
        piece = re.search(r"piece(\d+)", name)
        impl = re.search(r"\[(c|py)-", name)
        column = (
            "reference-style"
            if "reference_style" in name
            else f"mlpe-fast {impl[1] if impl else '?'}"
        )
        table[piece[1] if piece else "-"][column] = per_event
    columns = ["mlpe-fast c", "mlpe-fast py", "reference-style"]
    print(
        f"{'piece (B)':>10} " + " ".join(f"{c:>16}" for c in columns) + f" {'ref/c':>8} {'py/c':>8}"
    )
    for piece in sorted(table, key=lambda p: int(p) if p.isdigit() else 0):
        row = table[piece]
        cells = " ".join(f"{row[c]:>13.1f} ns" if c in row else f"{'':>16}" for c in columns)
        c = row.get("mlpe-fast c")
        ratios = ""
        if c:
            for other in ("reference-style", "mlpe-fast py"):
                ratios += f" {row[other] / c:>7.1f}x" if other in row else f" {'':>8}"
        print(f"{piece:>10} {cells}{ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench.json"))
