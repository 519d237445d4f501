"""Plots the CI-day benchmark: Karpenter's nodes over the day, one panel per arm, with the test
runs that saw a pod disrupted marked. Usage: ci-day-plot.py OUT_DIR PNG."""

import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TITLES = {
    "a": "a. nothing",
    "b": "b. minAvailable: 1 PDB",
    "c": "c. 2 replicas + maxUnavailable: 1",
    "d": "d. the guard",
    "e": "e. interception only",
}


def main(out_dir: str, png: str) -> None:
    nodes = defaultdict(list)
    with open(f"{out_dir}/nodes.csv") as f:
        for row in csv.DictReader(f):
            nodes[row["arm"]].append(
                (float(row["seconds"]) / 60, int(row["nodes"]), int(row["draining"]))
            )
    disrupted = defaultdict(list)
    with open(f"{out_dir}/runs.csv") as f:
        for row in csv.DictReader(f):
            if row["pod_gone"] == "true" or float(row["downtime"]) > 0:
                disrupted[row["arm"]].append(float(row["seconds"]) / 60)
    arms = sorted(nodes)
    fig, axes = plt.subplots(len(arms), 1, figsize=(10, 2.2 * len(arms)), sharex=True, squeeze=False)
    top = max(n for arm in arms for _, n, _ in nodes[arm]) + 1
    for ax, arm in zip(axes[:, 0], arms):
        t = [s[0] for s in nodes[arm]]
        ax.step(t, [s[1] for s in nodes[arm]], where="post", label="nodes", color="tab:blue")
        ax.step(t, [s[2] for s in nodes[arm]], where="post", label="draining", color="tab:orange")
        for x in disrupted[arm]:
            ax.axvline(x, color="tab:red", alpha=0.35, linewidth=1)
        ax.set_ylim(0, top)
        ax.set_ylabel("nodes")
        ax.set_title(f"{TITLES.get(arm, arm)}: {len(disrupted[arm])} disrupted test runs", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("minutes into the day (red: a test run that saw a pod disrupted)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
