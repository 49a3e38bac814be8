"""Draw docs/images/ddp_timeline.png: one measured DistributedDataParallel step on 2 processes.

The timeline comes from the benchmark (``python benchmarks/distributed.py --timeline FILE``):
rank 0's backward as one bar, and for each gradient bucket the span from the moment its last
gradient arrived (its all-reduce started) to the moment the engine reported it done. Bars that
end inside the backward bar were hidden behind it. Run from the repository root:
``python docs/scripts/distributed_timeline.py FILE``. Needs matplotlib.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = json.loads(Path(path).read_text())
    start, end = timeline["backward"]
    launched = {b: t for event, b, t in timeline["events"] if event == "launch"}
    done = {b: t for event, b, t in timeline["events"] if event == "done"}
    buckets = sorted(launched)
    figure, axes = plt.subplots(figsize=(8, 1.2 + 0.4 * len(buckets)))
    axes.barh(len(buckets), (end - start) * 1e3, left=start * 1e3, color="#999999")
    for row, bucket in enumerate(buckets):
        left = launched[bucket] * 1e3
        width = max((done[bucket] - launched[bucket]) * 1e3, 0.05)
        axes.barh(len(buckets) - 1 - row, width, left=left, color="#e07b00")
    labels = [f"bucket {b} all-reduce" for b in reversed(buckets)] + ["backward (rank 0)"]
    axes.set_yticks(range(len(buckets) + 1), labels)
    axes.set_xlabel("milliseconds from the start of backward")
    axes.set_title("One DDP step on 2 CPU processes: buckets reduce while backward goes on")
    figure.tight_layout()
    target = ROOT / "docs" / "images" / "ddp_timeline.png"
    figure.savefig(target, dpi=100)
    print(f"wrote {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1])
