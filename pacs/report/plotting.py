"""What every figure of the report shares: matplotlib without a display, and a figure saved as PNG and PDF."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pacs.io import atomic_path  # noqa: E402

__all__ = ["plt", "save_figure"]


def save_figure(fig, stem: Path) -> list[Path]:
    """``<stem>.png`` and ``<stem>.pdf``, each written whole or not at all; the figure closed."""
    paths = []
    for suffix in (".png", ".pdf"):  # appended: a swept method's name may have a dot (pacs_beta_0.5)
        path = stem.with_name(stem.name + suffix)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=suffix[1:], bbox_inches="tight", dpi=150)
        paths.append(path)
    plt.close(fig)
    return paths
