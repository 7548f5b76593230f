"""The diagrams of the tutorial's pages, drawn with matplotlib.

They show what a page explains; the drawing itself is not what the page
teaches, so it lives here and each page calls one function per figure.
"""

from __future__ import annotations

import numpy as np


def normalized_matrices(panels: list[tuple[str, object]]):
    """Heat maps of small matrices with their values written in, one panel per ``(title, matrix)``."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(3 * len(panels), 2.8))
    for ax, (title, data) in zip(axes, panels):
        data = np.asarray(data, dtype=float)
        limit = np.abs(data).max()
        ax.imshow(data, cmap="coolwarm", vmin=-limit, vmax=limit)
        for (i, j), value in np.ndenumerate(data):
            ax.text(j, i, f"{value:.2g}", ha="center", va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("feature")
        ax.set_xticks(range(data.shape[1]))
        ax.set_yticks(range(data.shape[0]))
    axes[0].set_ylabel("sample")
    fig.tight_layout()
    return fig


def lock_timeline(rows: int = 8, buffers: int = 3, add: float = 0.45):
    """The Triton tutorial's backward over time: the program of each row computes its row of dx,
    then takes the lock of buffer ``row % buffers`` and adds its terms there; programs that share a
    buffer queue for its lock, in the order they happen to arrive. A second kernel sums the buffers."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    palette = plt.get_cmap("Pastel1").colors
    done = [1.0 + 0.14 * ((5 * r + 2) % 7) for r in range(rows)]  # when each program's dx is written
    free = [0.0] * buffers
    fig, ax = plt.subplots(figsize=(10, 0.42 * rows + 1.6))
    for r in sorted(range(rows), key=lambda r: done[r]):  # first to arrive, first to take the lock
        group, y = r % buffers, rows - 1 - r
        start = max(done[r], free[group])
        free[group] = start + add
        ax.barh(y, done[r], color="0.88", edgecolor="black", lw=0.6)
        if start > done[r]:
            ax.barh(y, start - done[r], left=done[r], color="white", edgecolor="tab:red", hatch="////", lw=0.6)
        ax.barh(y, add, left=start, color=palette[group], edgecolor="black", lw=0.6)
        ax.text(start + add / 2, y, f"+= {group}", ha="center", va="center", fontsize=8)
    end = max(free)
    ax.barh(-1.3, 0.5, left=end, color="0.6", edgecolor="black", lw=0.6)
    ax.text(end + 0.25, -1.3, "sum", ha="center", va="center", fontsize=8)
    ax.set_yticks([rows - 1 - r for r in range(rows)] + [-1.3],
                  [f"row {r}" for r in range(rows)] + ["second kernel"])  # fmt: skip
    ax.set_xlabel("time")
    ax.set_xticks([])
    ax.legend(handles=[Patch(facecolor="0.88", edgecolor="black", label="its row of dx"),
                       Patch(facecolor="white", edgecolor="tab:red", hatch="////", label="waiting for the lock"),
                       Patch(facecolor=palette[0], edgecolor="black", label="adding into buffer 0, 1 or 2")],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # fmt: skip
    ax.set_title(f"Locks: one program per row, {buffers} shared buffers; programs of one buffer queue", fontsize=10)
    fig.tight_layout()
    return fig


def private_partials(rows: int = 8, programs: int = 3):
    """The lock-free backward: program ``p`` walks rows ``p, p + programs, ...``, sums their terms in
    its registers and writes one partial row of its own; the partial rows are added in a fixed order."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    palette = plt.get_cmap("Pastel2").colors
    fig, ax = plt.subplots(figsize=(9, 0.42 * rows + 1.6))

    def box(x, y, w, h, text, color):
        ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", lw=0.8))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=8)

    def arrow(start, end):
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, color="0.3", lw=0.9))

    height, top = 0.8 * rows, 0.8 * rows - 0.6
    band = height / programs
    for p in range(programs):
        y = top - (p + 1) * band + 0.7
        owned = list(range(p, rows, programs))
        box(0.0, y, 3.2, band - 0.3, f"program {p}: rows {', '.join(map(str, owned))}\n"
            "terms summed in its registers", palette[p])  # fmt: skip
        box(4.2, y + (band - 0.3) / 2 - 0.3, 2.2, 0.6, f"partial row {p}", palette[p])
        arrow((3.2, y + (band - 0.3) / 2), (4.2, y + (band - 0.3) / 2))
        arrow((6.4, y + (band - 0.3) / 2), (7.4, height / 2))
    order = " + ".join(f"partial row {p}" for p in range(programs))
    box(7.4, height / 2 - 0.6, 2.6, 1.2, "dw = " + order.replace(" + ", "\n+ ", 1) + "\nin a fixed order", "0.85")
    ax.set_xlim(-0.2, 10.2)
    ax.set_ylim(-0.2, height + 0.4)
    ax.axis("off")
    ax.set_title(f"No locks: {programs} programs, each with its own partial row; nothing waits, nothing is shared",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return fig
