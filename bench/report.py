"""Benchmark rows -> a markdown table per section and a PNG of every ratio (reference = 1.0)."""

from __future__ import annotations

from pathlib import Path


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    return str(value)


def write_markdown(path: Path, machine: dict, results: dict[str, list[dict]], command: str) -> None:
    lines = [f"Made by `{command}` on {machine['cpus']} CPUs, Python {machine['python']}, {machine['when']}.", ""]
    for name, rows in results.items():
        if not rows:
            continue
        columns = list(dict.fromkeys(key for row in rows for key in row))
        lines += [f"### {name}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
        lines.append("")
    path.write_text("\n".join(lines))


def _ratios(results: dict[str, list[dict]]):
    for name, rows in results.items():
        for row in rows:
            for key, value in row.items():
                if "ratio" in key and isinstance(value, (int, float)) and value > 0:
                    label = " ".join(str(row[k]) for k in ("vocabulary", "case", "workers", "streams") if k in row)
                    yield f"{name}: {label} ({key})", float(value)


def write_plot(path: Path, results: dict[str, list[dict]]) -> bool:
    """A horizontal bar per ratio on a log axis; skipped (False) when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    bars = list(_ratios(results))
    if not bars:
        return False
    labels, values = zip(*bars)
    figure, axes = plt.subplots(figsize=(10, 0.3 * len(bars) + 1.2))
    axes.barh(range(len(values)), values, color=["tab:green" if v >= 1 else "tab:red" for v in values])
    axes.set_yticks(range(len(labels)), labels, fontsize=7)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_xlabel("tokworker / reference (higher is better for tokworker)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True
