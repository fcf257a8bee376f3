"""A run's results as a Markdown report and a PNG chart (accuracy by split/tier with 95%
intervals, beside the published reference figures quoted in DESIGN.md)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.evaluation.personafeedback import TIERS

# Published figures quoted in DESIGN.md ("PersonaFeedback"): (label, low, high). A single
# figure has low == high; the off-the-shelf reward models are quoted as a range.
REFERENCES: tuple[tuple[str, float, float], ...] = (
    ("strong LLMs, specific split (avg, published)", 0.77, 0.77),
    ("reward model trained on personalized data (published)", 0.731, 0.731),
    ("off-the-shelf reward models, specific/easy (published)", 0.50, 0.54),
)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _ci(ci: Any) -> str:
    if not isinstance(ci, list) or len(ci) != 2:
        return "n/a"
    return f"{100 * ci[0]:.1f}-{100 * ci[1]:.1f}%"


def ordered_keys(keys: Iterable[str]) -> list[str]:
    """``split/tier`` keys by split (alphabetically), then tier in its natural order (easy,
    medium, hard), any other tier after those alphabetically. (The results hold them sorted
    as strings, which puts hard before medium.)"""

    def rank(key: str) -> tuple[str, int, str]:
        split, _, tier = key.rpartition("/")
        return (split, TIERS.index(tier) if tier in TIERS else len(TIERS), tier)

    return sorted(keys, key=rank)


def markdown(run: Mapping[str, Any], chart_url: str | None = None) -> str:
    """``run`` holds run_id, params and results (the CLI's JSON keys)."""
    results: Mapping[str, Any] = run.get("results") or {}
    params: Mapping[str, Any] = run.get("params") or {}
    lines = [
        f"# PersonaFeedback evaluation {run.get('run_id', '')}".rstrip(),
        "",
        f"- Judge: `{results.get('judge', params.get('judge'))}`",
        f"- Data: {params.get('dataset') or ('upload ' + str(params.get('upload_id')))}",
        f"- Cases: {results.get('n', 0)} (seed {results.get('seed', params.get('seed', 0))})",
        f"- Accuracy: {_pct(results.get('accuracy'))} (95% CI {_ci(results.get('ci95'))})",
        f"- Wall time: {results.get('wall_time_s', 'n/a')} s",
    ]
    if results.get("position_consistency") is not None:
        lines.append(f"- Position consistency: {_pct(results['position_consistency'])}")
    if results.get("tokens") is not None:
        lines.append(
            f"- Tokens: {results['tokens']} (unreadable answers: {results.get('unparsed', 0)})"
        )
    lines += [
        "",
        "| split/tier | n | accuracy | 95% CI |",
        "|---|---:|---:|---|",
    ]
    cells: Mapping[str, Any] = results.get("by_split_tier") or {}
    for key in ordered_keys(cells):
        cell = cells[key]
        lines.append(f"| {key} | {cell['n']} | {_pct(cell['accuracy'])} | {_ci(cell['ci95'])} |")
    for name, group in (results.get("by_group") or {}).items():
        lines.append(
            f"| {name} (all tiers) | {group['n']} | {_pct(group['accuracy'])} "
            f"| {_ci(group['ci95'])} |"
        )
    lines += ["", "Published reference figures (DESIGN.md):", ""]
    for label, low, high in REFERENCES:
        figure = _pct(low) if low == high else f"{_pct(low)}-{_pct(high)}"
        lines.append(f"- {label}: {figure}")
    lines += [
        "",
        "Intervals are seeded percentile bootstraps (1000 resamples). A case counts for the "
        "`llm` judge only when both reply orders pick the chosen reply. Figures on a set that "
        "overlaps a judge's training users (the shipped reward model was trained on pf_prefeval "
        "users outside its held-out topics) overstate that judge.",
    ]
    problems = results.get("problems") or []
    if problems:
        lines += ["", f"Rows skipped while loading: {results.get('problems_total', len(problems))}"]
        lines += [f"- `{p}`" for p in problems[:20]]
    if chart_url:
        lines += ["", f"![accuracy by tier]({chart_url})"]
    return "\n".join(lines) + "\n"


def label_heights(accuracy: Sequence[float], above: Sequence[float]) -> list[float]:
    """Where each bar's value label starts: just above the top of its error bar (accuracy plus
    the interval's upper half), so the label and the bar's cap never overlap."""
    return [a + h + 0.015 for a, h in zip(accuracy, above, strict=True)]


class ChartUnavailable(RuntimeError):
    """matplotlib is not installed: charts come with the `reports` extra."""


def chart_png(results: Mapping[str, Any], title: str = "PersonaFeedback accuracy") -> bytes:
    """Bars of accuracy per split/tier with their 95% intervals; reference figures as lines.

    Raises ChartUnavailable where matplotlib is not installed (a serving-only install)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ChartUnavailable(
            "charts need matplotlib: install the reports extra (pip install 'tailor[reports]')"
        ) from exc

    matplotlib.use("Agg")  # no display; safe in a server thread
    from matplotlib.figure import Figure

    cells: Mapping[str, Any] = results.get("by_split_tier") or {}
    keys = ordered_keys(cells)
    acc = [float(cells[k]["accuracy"]) for k in keys]
    low = [max(0.0, a - float(cells[k]["ci95"][0])) for a, k in zip(acc, keys, strict=True)]
    high = [max(0.0, float(cells[k]["ci95"][1]) - a) for a, k in zip(acc, keys, strict=True)]
    tops = label_heights(acc, high)

    # A Figure (not pyplot) keeps no global state, so concurrent requests cannot mix charts.
    fig = Figure(figsize=(7.5, 4.2), dpi=100)
    ax = fig.subplots()
    positions = list(range(len(keys)))
    ax.bar(positions, acc, yerr=[low, high], capsize=4, color="#4C72B0", label="this run")
    for x, a, y in zip(positions, acc, tops, strict=True):
        # Above the error bar's cap, never across it.
        ax.text(x, y, f"{100 * a:.1f}", ha="center", va="bottom", fontsize=8)
    styles = ("--", ":", "-.")
    for (label, ref_low, ref_high), style in zip(REFERENCES, styles, strict=True):
        if ref_low == ref_high:
            ax.axhline(ref_low, linestyle=style, color="#C44E52", linewidth=1, label=label)
        else:
            ax.axhspan(ref_low, ref_high, color="#DD8452", alpha=0.25, label=label)
    ax.axhline(0.5, color="grey", linewidth=0.8, label="chance")
    ax.set_xticks(positions, keys, rotation=20, fontsize=8)
    ax.set_ylim(0, max([1.05, *(y + 0.07 for y in tops)]))
    ax.set_ylabel("accuracy")
    ax.set_title(f"{title} — judge {results.get('judge', '?')}, n={results.get('n', 0)}")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
