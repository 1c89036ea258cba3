"""Drawing the tuner's curve: text bars for the terminal, SVG/PNG through matplotlib (optional)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from parinfo.errors import TuneError, UsageError
from parinfo.machine.checks import shown

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.tuning.outcome import TuneOutcome
    from parinfo.tuning.search import Point, Stats

PLOT_SUFFIXES = (".svg", ".png")
TITLE_CHARS = 90  # what fits across the figure at the title's font size

MISSING_MATPLOTLIB = "matplotlib is needed for --plot: pip install 'parinfo[plot]'"


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis when longer."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[:limit - 1].rstrip() + "\u2026"


def check_plot_path(path: str | os.PathLike[str]) -> None:
    """Refuse a --plot target before any measuring: wrong suffix, missing folder, no matplotlib."""
    p = os.fspath(path)
    suffix = os.path.splitext(p)[1].lower()
    if suffix not in PLOT_SUFFIXES:
        raise UsageError(f"--plot {shown(p)}: the file name must end in .svg or .png")
    folder = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(folder):
        raise UsageError(f"--plot {shown(p)}: folder {shown(folder)} does not exist")
    require_matplotlib()


def require_matplotlib() -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise TuneError(MISSING_MATPLOTLIB)


def text_plot(result: TuneOutcome, width: int = 50) -> str:
    """One bar per measured point, length proportional to its median; the chosen point is marked."""
    rows = result.measured
    if not rows:
        return ""
    top = max(s.median for _, s in rows)
    label_w = max(len(result.label(p)) for p, _ in rows)
    lines = [f"median ms {result.unit.split(' ', 1)[1]} against {result.axis}"]
    for p, s in rows:
        n = max(1, round(width * s.median / top)) if top > 0 else 1
        mark = "  <- best" if p == result.best else ""
        lines.append(f"{result.label(p):>{label_w}} | {'#' * n:<{width}} {s.median * 1e3:.4g} ms{mark}")
    return "\n".join(lines)


def save_plot(result: TuneOutcome, path: str | os.PathLike[str]) -> None:
    """Median with its interquartile band against the thread count; one line per inter-op count."""
    check_plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[int, list[tuple[Point, Stats]]] = {}
    for p, s in result.measured:
        groups.setdefault(p.inter if result.pairs else 1, []).append((p, s))
    for inter, rows in sorted(groups.items()):
        xs = [p.intra for p, _ in rows]
        med = [s.median * 1e3 for _, s in rows]
        lo = [(s.median - s.quartiles[0]) * 1e3 for _, s in rows]
        hi = [(s.quartiles[1] - s.median) * 1e3 for _, s in rows]
        name = None
        if result.pairs:
            name = f"{inter} concurrent requests" if result.concurrent else f"{inter} inter-op threads"
        ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=name)
    b, bs = result.best, result.best_stats
    ax.scatter([b.intra], [bs.median * 1e3], s=160, facecolors="none", edgecolors="red", zorder=5,
               label=f"chosen: {result.label(b)}")
    skipped = [p.intra for p in result.search.skipped if not result.pairs or p.inter == b.inter]
    if skipped:
        ax.plot(skipped, [bs.median * 1e3] * len(skipped), "x", color="grey", label="skipped")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("intra-op threads")
    ax.set_ylabel(f"median ms ({result.unit.split(' ', 1)[1]})")
    ax.set_title(f"{shorten(result.workload, TITLE_CHARS)}\n{result.objective}, "
                 f"{result.machine.usable_cpus} usable CPUs",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(os.fspath(path))
    except OSError as exc:
        raise UsageError(f"--plot {shown(os.fspath(path))}: cannot write ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
