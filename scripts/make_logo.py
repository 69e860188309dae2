"""Draw the book's logo and favicon (figures/logo.svg, figures/favicon.png).

The picture is the book's subject: a dense N×N attention matrix (left) next to the thin
factors φ(Q) and φ(K)ᵀV that replace it (right).
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

FIGURES = Path(__file__).resolve().parent.parent / "figures"


def draw(ax):
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((8, 8)) + 2 * np.eye(8)
    attention = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    ax.imshow(attention, cmap="Blues", extent=(0, 8, 0, 8))
    ax.imshow(rng.random((8, 2)), cmap="Oranges", extent=(10, 12, 0, 8))
    ax.imshow(rng.random((2, 2)), cmap="Oranges", extent=(13, 15, 6, 8))
    ax.set_xlim(-0.2, 15.2)
    ax.set_ylim(-0.2, 8.2)
    ax.axis("off")


def main():
    fig, ax = plt.subplots(figsize=(3.8, 2))
    draw(ax)
    fig.savefig(
        FIGURES / "logo.svg", bbox_inches="tight", transparent=True, metadata={"Date": None}
    )
    fig, ax = plt.subplots(figsize=(1, 1))
    draw(ax)
    ax.set_xlim(-0.2, 8.2)
    fig.savefig(FIGURES / "favicon.png", dpi=64, bbox_inches="tight", transparent=True)


if __name__ == "__main__":
    main()
