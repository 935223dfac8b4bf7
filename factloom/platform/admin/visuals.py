"""What the pages draw: graph elements for the browser's Cytoscape canvas and small inline SVG charts.

The SVG is built here, on the server, so a verifier chart needs no script; every text in it is
escaped. Graph elements are plain dicts in Cytoscape's JSON format (``{"data": {...}, "classes": ...}``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from markupsafe import Markup, escape

from factloom.graph.explore import MoreOf, Neighbourhood
from factloom.graph.types import entity_key
from factloom.platform.query.paths import relation_text
from factloom.platform.query.schemas import AnswerOut

__all__ = ["neighbourhood_elements", "more_elements", "answer_elements",
           "verifier_chart", "minute_chart", "status_bar", "version_bars", "certification_chart",
           "COLOURS"]

COLOURS = {
    "pending": "#94a3b8", "checking": "#60a5fa", "needs_review": "#f59e0b", "accepted": "#34d399",
    "reviewed": "#a78bfa", "committed": "#10b981", "rejected": "#f87171",
}


def neighbourhood_elements(
    graph: Neighbourhood, *, focus: Iterable[str] = (), expanded: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The entities and facts of a neighbourhood, and one summary node per relation left undrawn."""
    focus, expanded = set(focus), set(expanded) | set(focus)
    nodes = [{"data": {"id": i, "label": name}, "classes": " ".join(
        c for c, on in (("focus", i in focus), ("expanded", i in expanded)) if on)}
        for i, name in graph.names.items()]
    edges = [{"data": {"id": e.fact_id, "source": e.source_id, "target": e.target_id, "label": e.predicate,
                       "sources": list(e.sources)}} for e in graph.edges]
    return nodes + edges + [element for more in graph.more for element in more_elements(more)]


def more_elements(more: MoreOf) -> list[dict[str, Any]]:
    """A summary node, "+212 more ←directed_by–", tied to its entity; a click on it draws the next
    page of the relation (its data says which) and updates it, or removes it after the last page."""
    node_id = f"more:{more.entity_id}:{more.predicate}:{'out' if more.outgoing else 'in'}"
    ends = (more.entity_id, node_id) if more.outgoing else (node_id, more.entity_id)
    label = f"+{more.total - more.shown} more {relation_text(more.predicate, more.outgoing)}"
    return [
        {"data": {"id": node_id, "label": label,
                  "entity": more.entity_id, "predicate": more.predicate, "outgoing": more.outgoing,
                  "shown": more.shown, "total": more.total}, "classes": "more"},
        {"data": {"id": f"to-{node_id}", "source": ends[0], "target": ends[1]}, "classes": "more"},
    ]


def answer_elements(answers: Sequence[AnswerOut], seeds: Iterable[str]) -> list[dict[str, Any]]:
    """Every entity and fact on the answers' paths; seeds and answers marked, each edge tagged with its
    answers (ranks) and its paths ("rank-index"), drawn in the fact's own direction."""
    seed_keys = {entity_key(s) for s in seeds}
    nodes: dict[str, dict[str, Any]] = {}
    edges: dict[str, dict[str, Any]] = {}

    def node(name: str) -> str:
        key = "n:" + entity_key(name)
        entry = nodes.setdefault(key, {"data": {"id": key, "label": name}, "classes": set()})
        if entity_key(name) in seed_keys:
            entry["classes"].add("seed")
        return key

    for rank, answer in enumerate(answers):
        entry = nodes.setdefault(node(answer.name), {})
        entry["classes"].add("answer")
        entry["data"]["rank"] = rank
        for index, path in enumerate(answer.paths):
            for step in path:
                s, o = node(step.subject), node(step.object)
                edge = edges.setdefault(step.fact_id, {"data": {"id": step.fact_id, "source": s, "target": o,
                                                                  "label": step.predicate, "answers": [],
                                                                  "paths": []}})
                if rank not in edge["data"]["answers"]:
                    edge["data"]["answers"].append(rank)
                edge["data"]["paths"].append(f"{rank}-{index}")
    for entry in nodes.values():
        entry["classes"] = " ".join(sorted(entry["classes"]))
    return list(nodes.values()) + list(edges.values())


def _bar_colour(p: float) -> str:
    return "#ef4444" if p < 0.3 else "#f59e0b" if p < 0.7 else "#10b981"


def verifier_chart(
    rows: Sequence[tuple[str, float | None]], *, accept: float | None = None, reject: float | None = None,
    width: int = 420,
) -> Markup:
    """Horizontal bars of each verifier's probability (0–1), abstentions greyed, thresholds as lines."""
    label_w, value_w, row_h = 130, 44, 26
    bar_w = width - label_w - value_w
    height = row_h * max(len(rows), 1) + 18
    parts = [f'<svg class="chart" role="img" aria-label="verifier scores" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, (name, p) in enumerate(rows):
        y = i * row_h + 4
        parts.append(f'<text x="0" y="{y + 14}" class="chart-label">{escape(name)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{bar_w}" height="14" rx="3" class="chart-track"/>')
        if p is None:
            parts.append(f'<text x="{label_w + 6}" y="{y + 14}" class="chart-abstain">abstained</text>')
            value = "—"
        else:
            w = max(2.0, bar_w * min(max(p, 0.0), 1.0))
            parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="14" rx="3" '
                         f'fill="{_bar_colour(p)}"><title>{escape(name)}: {p:.3f}</title></rect>')
            value = f"{p:.2f}"
        parts.append(f'<text x="{width - 4}" y="{y + 14}" text-anchor="end" class="chart-value">{value}</text>')
    axis_y = row_h * max(len(rows), 1) + 4
    for t, cls in ((reject, "chart-reject"), (accept, "chart-accept")):
        if t is not None:
            x = label_w + bar_w * t
            parts.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{axis_y}" class="{cls}"/>')
            parts.append(f'<text x="{x:.1f}" y="{axis_y + 12}" text-anchor="middle" class="chart-tick">{t:g}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - numbers and escape()d names only


def minute_chart(values: Sequence[int], *, width: int = 1120, height: int = 160) -> Markup:
    """Bars of a per-minute series (oldest first, the last the current minute) with both axes:
    facts per minute up the left, minutes ago along the bottom."""
    if not values:
        return Markup("")
    left, bottom, top_pad = 44, 22, 8
    plot_w, plot_h = width - left - 8, height - bottom - top_pad
    top = _nice_top(max(values))
    step = plot_w / len(values)
    y = [top_pad + plot_h - plot_h * v / top for v in values]
    bars = "".join(
        f'<rect x="{left + i * step:.1f}" y="{y[i]:.1f}" width="{max(step - 1, 1):.1f}" '
        f'height="{top_pad + plot_h - y[i]:.1f}" class="spark-bar">'
        f'<title>{len(values) - 1 - i} min ago: {v}</title></rect>'
        for i, v in enumerate(values)
    )
    ticks = []
    for frac in (0.0, 0.5, 1.0):
        ty = top_pad + plot_h - plot_h * frac
        ticks.append(f'<line x1="{left}" x2="{width - 8}" y1="{ty:.1f}" y2="{ty:.1f}" class="grid-line"/>'
                     f'<text x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end">{top * frac:g}</text>')
    n = len(values)
    for ago in sorted({n - 1, (n - 1) // 2, 0}, reverse=True):
        tx = left + (n - 1 - ago) * step + step / 2
        ticks.append(f'<text x="{tx:.1f}" y="{height - 6}" text-anchor="middle">'
                     f'{"now" if ago == 0 else f"−{ago} min"}</text>')
    axes = (f'<line x1="{left}" x2="{left}" y1="{top_pad}" y2="{top_pad + plot_h}" class="axis"/>'
            f'<line x1="{left}" x2="{width - 8}" y1="{top_pad + plot_h}" y2="{top_pad + plot_h}" class="axis"/>'
            f'<text x="12" y="{top_pad + plot_h / 2:.1f}" transform="rotate(-90 12 {top_pad + plot_h / 2:.1f})" '
            f'text-anchor="middle">facts / min</text>')
    return Markup(  # noqa: S704 - numbers and fixed words only
        f'<svg class="spark minute-chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="committed facts per minute, last {n} minutes" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(ticks)}{bars}{axes}</svg>')


def _nice_top(value: int) -> float:
    """The axis maximum: 1, 2 or 5 times a power of ten, at least ``value`` (and at least 1)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= value))


def status_bar(counts: dict[str, int], order: Sequence[str], *, width: int = 220) -> Markup:
    total = sum(counts.get(s, 0) for s in order)
    if not total:
        return Markup('<span class="muted">empty</span>')
    x, parts = 0.0, []
    for status in order:
        n = counts.get(status, 0)
        if not n:
            continue
        w = width * n / total
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="10" fill="{COLOURS.get(status, "#999")}">'
                     f'<title>{escape(status)}: {n}</title></rect>')
        x += w
    return Markup(f'<svg class="statusbar" width="{width}" height="10" viewBox="0 0 {width} 10" '  # noqa: S704 - numbers and escape()d statuses
                  f'xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')


def version_bars(rows: Sequence[tuple[str, str, float | None, float | None]], *, width: int = 520) -> Markup:
    """Versions side by side: for each ``(version, role, hits@1, p95 ms)`` a bar of its feedback
    hits@1 (0–1) and one of its p95 latency (scaled to the slowest); a missing figure draws no bar."""
    if not rows:
        return Markup("")
    label_w, row_h, bar_h = 210, 34, 12
    bar_w = (width - label_w) / 2 - 10
    slowest = max([p for *_, p in rows if p] or [1.0])
    parts = [f'<text x="{label_w}" y="11" class="chart-label">feedback hits@1</text>',
             f'<text x="{label_w + bar_w + 10:.0f}" y="11" class="chart-label">p95 latency</text>']
    for i, (version, role, hits, p95) in enumerate(rows):
        y = 18 + i * row_h
        parts.append(f'<text x="0" y="{y + 10}" class="chart-label">{escape(version[-28:])}</text>'
                     f'<text x="0" y="{y + 24}" class="chart-label muted">{escape(role)}</text>')
        if hits is not None:
            parts.append(f'<rect x="{label_w}" y="{y}" width="{bar_w * hits:.1f}" height="{bar_h}" '
                         f'fill="{_bar_colour(hits)}"><title>hits@1 {hits:.3f}</title></rect>'
                         f'<text x="{label_w + bar_w * hits + 3:.1f}" y="{y + 10}" '
                         f'class="chart-label">{hits:.2f}</text>')
        if p95 is not None:
            w = bar_w * p95 / slowest
            parts.append(f'<rect x="{label_w + bar_w + 10:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                         f'fill="#7a8fa6"><title>p95 ≤ {p95:.0f} ms</title></rect>'
                         f'<text x="{label_w + bar_w + 13 + w:.1f}" y="{y + 10}" '
                         f'class="chart-label">{p95:.0f} ms</text>')
    height = 18 + len(rows) * row_h
    return Markup(f'<svg class="versions" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '  # noqa: S704 - numbers and escape()d names only
                  f'role="img" aria-label="versions side by side" xmlns="http://www.w3.org/2000/svg">'
                  f'{"".join(parts)}</svg>')


def certification_chart(runs: Sequence[dict[str, Any]], *, width: int = 720, height: int = 180) -> Markup:
    """A kb's re-certification runs over time (oldest left): the certified error bound at the accept
    threshold in service (line), the target (dashed), the realised audit error with its interval
    (points and whiskers) on the left axis, and the automation rate (grey line) on the right, 0–1."""
    if not runs:
        return Markup("")
    left, right, bottom, top_pad = 52, 40, 22, 10
    plot_w, plot_h = width - left - right, height - bottom - top_pad
    target = float(runs[-1].get("target") or 0.01)

    def accept_of(run: dict[str, Any], key: str) -> float | None:
        value = (run.get("audit_error") or {}).get("accept", {}).get(key) if key != "bound" else \
            (run.get("bound") or {}).get("accept")
        return float(value) if isinstance(value, int | float) else None

    seen = [v for r in runs for v in (accept_of(r, "bound"), accept_of(r, "rate"), accept_of(r, "high"))
            if v is not None]
    top = max([2 * target, *seen])
    top = min(1.0, top)
    n = len(runs)
    step = plot_w / max(n - 1, 1)

    def x(i: int) -> float:
        return left + (i * step if n > 1 else plot_w / 2)

    def y(v: float, scale: float = top) -> float:
        return top_pad + plot_h - plot_h * min(v, scale) / scale

    parts = []
    for frac in (0.0, 0.5, 1.0):
        ty = top_pad + plot_h - plot_h * frac
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{ty:.1f}" y2="{ty:.1f}" class="grid-line"/>'
                     f'<text x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end">{top * frac:.3g}</text>'
                     f'<text x="{width - right + 6}" y="{ty + 4:.1f}">{frac:.1f}</text>')
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(target):.1f}" y2="{y(target):.1f}" '
                 f'stroke="#dc2626" stroke-dasharray="5 4"><title>target {target:g}</title></line>')
    automation = [(i, float(r["automation"])) for i, r in enumerate(runs)
                  if isinstance(r.get("automation"), int | float)]
    if automation:
        points = " ".join(f"{x(i):.1f},{y(a, 1.0):.1f}" for i, a in automation)
        parts.append(f'<polyline points="{points}" fill="none" stroke="#94a3b8" stroke-width="1.5">'
                     f'<title>automation rate</title></polyline>')
    bounds = [(i, b) for i, r in enumerate(runs) if (b := accept_of(r, "bound")) is not None]
    if bounds:
        points = " ".join(f"{x(i):.1f},{y(b):.1f}" for i, b in bounds)
        parts.append(f'<polyline points="{points}" fill="none" stroke="#2563eb" stroke-width="2">'
                     f'<title>certified bound</title></polyline>')
        parts += [f'<circle cx="{x(i):.1f}" cy="{y(b):.1f}" r="2.5" fill="#2563eb"><title>run {i + 1}: bound '
                  f'{b:.4g}</title></circle>' for i, b in bounds]
    for i, r in enumerate(runs):
        rate, low, high = accept_of(r, "rate"), accept_of(r, "low"), accept_of(r, "high")
        if rate is None:
            continue
        if low is not None and high is not None:
            parts.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(low):.1f}" y2="{y(high):.1f}" '
                         f'stroke="#f59e0b" stroke-width="1.5"/>')
        parts.append(f'<rect x="{x(i) - 3:.1f}" y="{y(rate) - 3:.1f}" width="6" height="6" fill="#f59e0b">'
                     f'<title>run {i + 1}: audit error {rate:.4g}</title></rect>')
    parts.append(f'<line x1="{left}" x2="{left}" y1="{top_pad}" y2="{top_pad + plot_h}" class="axis"/>'
                 f'<line x1="{left}" x2="{width - right}" y1="{top_pad + plot_h}" y2="{top_pad + plot_h}" '
                 f'class="axis"/><text x="{left}" y="{height - 6}">run 1</text>'
                 f'<text x="{width - right}" y="{height - 6}" text-anchor="end">run {n}</text>')
    return Markup(  # noqa: S704 - numbers and fixed words only
        f'<svg class="spark certification-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="certified bound, target, audit error and '
        f'automation over {n} runs" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')
