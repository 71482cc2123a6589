"""What every figure of the report shares: matplotlib without a display (Agg), imported at the first figure, and a
figure saved as PNG and PDF. The workflow imports the report's figure and table names at every parse (with
``--profile slurm`` twice in each job), which need no plotting: pyplot's import there was a third of a CPU
second each time."""

from functools import cache
from pathlib import Path

from pacs.io import atomic_path


@cache
def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def subplots(*args, **kwargs):
    """``matplotlib.pyplot.subplots``."""
    return pyplot().subplots(*args, **kwargs)


def colormap(name: str):
    """``matplotlib.pyplot.get_cmap``."""
    return pyplot().get_cmap(name)


def save_figure(fig, stem: Path) -> list[Path]:
    """``<stem>.png`` and ``<stem>.pdf``, each written whole or not at all; the figure closed."""
    paths = []
    for suffix in (".png", ".pdf"):  # appended: a swept method's name may have a dot (pacs_beta_0.5)
        path = stem.with_name(stem.name + suffix)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=suffix[1:], bbox_inches="tight", dpi=150)
        paths.append(path)
    pyplot().close(fig)
    return paths
