"""What the admin Status page shows: the key figures of the metrics catalogue, read from the API's own
registry (every process's counts where they share a multiprocess directory, as ``/metrics`` has them),
so a platform without Prometheus or Grafana still shows how it is doing.

The figures are totals since the platform's processes started (their multiprocess directory is emptied
then), not rates over a window: Prometheus and the Grafana dashboard (``deploy/grafana/``) keep the
history. A p95 is read from a histogram's cumulative buckets the way PromQL's ``histogram_quantile``
reads them: linear within the bucket that holds the rank, the bucket's upper bound where that is
``+Inf``'s neighbour.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape
from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from factloom.platform.metrics import scrape_registry

__all__ = ["Sample", "Bar", "Readings", "samples", "readings", "from_samples", "quantile", "bar_chart", "UNPROBED"]

# probes and scrapes: not the API's work
UNPROBED = frozenset({"/metrics", "/healthz", "/readyz"})
TOP_ROUTES = 12


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    text: str  # what the bar says, e.g. "120 ms" or "3.2 %"
    tone: str = "plain"  # plain | good | warn | bad


@dataclass
class Readings:
    """Each chart's bars; an empty list is a chart with nothing counted yet."""

    requests: list[Bar] = field(default_factory=list)
    latency: list[Bar] = field(default_factory=list)
    errors: list[Bar] = field(default_factory=list)
    queues: list[Bar] = field(default_factory=list)
    tasks: list[Bar] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    abstention: list[Bar] = field(default_factory=list)
    learn: list[Bar] = field(default_factory=list)
    served: list[Bar] = field(default_factory=list)
    agreement: list[Bar] = field(default_factory=list)
    failing: list[Bar] = field(default_factory=list)
    rollbacks: list[Bar] = field(default_factory=list)
    stores: list[Bar] = field(default_factory=list)
    entropy: list[Bar] = field(default_factory=list)


def samples(registry: CollectorRegistry | Collector) -> list[Sample]:
    return [Sample(s.name, dict(s.labels), s.value) for family in registry.collect() for s in family.samples]


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a histogram given as ``(upper bound, cumulative count)`` pairs."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower  # past the last finite bound: that bound is all we know
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return None


def _by(found: Sequence[Sample], name: str, keys: tuple[str, ...], **match: str) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for s in found:
        if s.name == name and all(s.labels.get(k) == v for k, v in match.items()):
            out[tuple(s.labels.get(k, "") for k in keys)] += s.value
    return out


def _quantiles(found: Sequence[Sample], name: str, keys: tuple[str, ...], q: float = 0.95,
               keep: frozenset[tuple[str, ...]] | None = None) -> dict[tuple[str, ...], float]:
    buckets: dict[tuple[str, ...], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for s in found:
        if s.name == f"{name}_bucket":
            key = tuple(s.labels.get(k, "") for k in keys)
            if keep is None or key in keep:
                buckets[key][float(s.labels["le"])] += s.value
    out = {}
    for key, by_bound in buckets.items():
        value = quantile(q, by_bound.items())
        if value is not None:
            out[key] = value
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _pct(share: float) -> str:
    return f"{share * 100:.1f} %"


def _count(n: float) -> str:
    return f"{n:,.0f}"


def readings(ledger: Collector) -> Readings:
    """Every chart of the page, from what ``/metrics`` would answer now."""
    return from_samples(samples(scrape_registry(ledger)))


def from_samples(found: Sequence[Sample]) -> Readings:
    out = Readings()
    http = "factloom_http_request_seconds"
    per_route = {k: v for k, v in _by(found, f"{http}_count", ("route",)).items() if k[0] not in UNPROBED and v}
    top = sorted(per_route, key=lambda k: -per_route[k])[:TOP_ROUTES]
    out.requests = [Bar(k[0], per_route[k], _count(per_route[k])) for k in top]
    p95 = _quantiles(found, http, ("route",), keep=frozenset(top))
    out.latency = [Bar(k[0], p95[k], _ms(p95[k]), "bad" if k[0] == "/v1/query" and p95[k] > 1 else "plain")
                   for k in top if k in p95]
    failed = _by(found, f"{http}_count", ("route", "status"))
    fives = {k[:1]: 0.0 for k in top}
    for (route, status), n in failed.items():
        if (route,) in fives and status.startswith("5"):
            fives[(route,)] += n
    out.errors = [Bar(k[0], fives[k] / per_route[k], _pct(fives[k] / per_route[k]),
                      "bad" if fives[k] / per_route[k] > 0.02 else "good") for k in top]

    depth = _by(found, "factloom_queue_depth", ("queue",))
    out.queues = [Bar(k[0], v, _count(v), "bad" if v > 500 else "plain") for k, v in sorted(depth.items())]
    task_p95 = _quantiles(found, "factloom_task_seconds", ("queue",))
    out.tasks = [Bar(k[0], v, _ms(v)) for k, v in sorted(task_p95.items())]

    out.verdicts = {k[0]: int(v) for k, v in _by(found, "factloom_check_verdicts_total", ("verdict",)).items() if v}
    checks = _by(found, "factloom_verifier_checks_total", ("verifier",))
    abstained = _by(found, "factloom_verifier_abstentions_total", ("verifier",))
    out.abstention = [Bar(k[0], abstained.get(k, 0.0) / n, f"{_pct(abstained.get(k, 0.0) / n)} of {_count(n)}")
                      for k, n in sorted(checks.items()) if n]

    updates = _by(found, "factloom_learn_updates_total", ("kind", "outcome"))
    out.learn = [Bar(f"{kind} {outcome}", v, _count(v), "bad" if outcome in ("failed", "error") else "plain")
                 for (kind, outcome), v in sorted(updates.items()) if v]
    served = _by(found, "factloom_served_questions_total", ("kb", "version", "role"))
    out.served = [Bar(f"{kb} · {role} · {version}", v, _count(v)) for (kb, version, role), v in sorted(served.items())
                  if v]
    agreed = _by(found, "factloom_shadow_agreement_total", ("kb", "version", "agree"))
    shadows: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (kb, version, agree), v in agreed.items():
        shadows[(kb, version)][0 if agree == "true" else 1] += v
    out.agreement = [Bar(f"{kb} · {version}", yes / (yes + no), f"{_pct(yes / (yes + no))} of {_count(yes + no)}")
                     for (kb, version), (yes, no) in sorted(shadows.items()) if yes + no]
    failing = _by(found, "factloom_model_failing_periods", ("kb", "kind"))
    out.failing = [Bar(f"{kb} · {kind}", v, f"{v:.0f}", "bad" if v >= 2 else "warn" if v else "good")
                   for (kb, kind), v in sorted(failing.items())]
    rolled = _by(found, "factloom_model_rollbacks_total", ("kb", "kind"))
    out.rollbacks = [Bar(f"{kb} · {kind}", v, _count(v), "bad") for (kb, kind), v in sorted(rolled.items()) if v]

    store_p95 = _quantiles(found, "factloom_store_seconds", ("store", "op"))
    out.stores = [Bar(f"{store} {op}", v, _ms(v)) for (store, op), v in sorted(store_p95.items())]
    sums = _by(found, "factloom_router_attention_entropy_sum", ("hop",))
    counts = _by(found, "factloom_router_attention_entropy_count", ("hop",))
    out.entropy = [Bar(f"hop {k[0]}", sums.get(k, 0.0) / n, f"{sums.get(k, 0.0) / n:.2f} nats")
                   for k, n in sorted(counts.items()) if n]
    return out


_TONES = {"plain": "#818cf8", "good": "#10b981", "warn": "#f59e0b", "bad": "#ef4444"}


def bar_chart(bars: Sequence[Bar], *, label: str, top: float | None = None, width: int = 460) -> Markup:
    """Horizontal bars, the longest (or ``top``) full width, each with its text; names escaped."""
    if not bars:
        return Markup('<p class="muted small">Nothing counted yet.</p>')
    label_w, value_w, row_h = 170, 96, 24
    bar_w = width - label_w - value_w
    scale = top if top is not None else max(max(b.value for b in bars), 1e-12)
    height = row_h * len(bars) + 4
    parts = [f'<svg class="chart" role="img" aria-label="{escape(label)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, b in enumerate(bars):
        y = i * row_h + 2
        name = b.label if len(b.label) <= 26 else b.label[:25] + "…"
        parts.append(f'<text x="0" y="{y + 14}" class="chart-label"><title>{escape(b.label)}</title>'
                     f'{escape(name)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{bar_w}" height="14" rx="3" class="chart-track"/>')
        w = max(2.0, bar_w * min(max(b.value / scale, 0.0), 1.0)) if b.value > 0 else 0.0
        if w:
            parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="14" rx="3" '
                         f'fill="{_TONES.get(b.tone, _TONES["plain"])}"><title>{escape(b.label)}: '
                         f'{escape(b.text)}</title></rect>')
        parts.append(f'<text x="{width - 4}" y="{y + 14}" text-anchor="end" class="chart-value">'
                     f'{escape(b.text)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - numbers and escape()d text only
