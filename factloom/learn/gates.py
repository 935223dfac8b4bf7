"""The gates a candidate version passes before it serves, and how their results are stored.

Two gates, each comparing the candidate with its parent on the same data:

- **retention**: its figure on a fixed probe of what the parent knew (old facts for a scorer, old
  questions for a reasoner) is at least ``retention`` (0.95) of the parent's: EWC's promise that
  learning the new did not forget the old;
- **new knowledge**: its figure on held-out new facts (or new questions) beats the parent's. Where
  the parent already scores perfectly nothing can beat it, so matching it passes.

The result is stored on the version (``model_version.gates``) as
``{"passed": bool, "retention": {...}, "new_knowledge": {...}}``, each gate with the candidate's
value, the parent's and the threshold it had to reach.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Gate", "judge"]


@dataclass(frozen=True, slots=True)
class Gate:
    name: str
    metric: str  # what was measured, e.g. "filtered_mrr" or "hits_at_1"
    value: float  # the candidate's
    parent: float
    threshold: float  # what the candidate had to reach
    strict: bool  # above the threshold (new knowledge) or at least it (retention)
    items: int  # how many facts or questions the figures come from

    @property
    def passed(self) -> bool:
        return bool(self.value > self.threshold if self.strict else self.value >= self.threshold)

    def as_dict(self) -> dict[str, Any]:
        # plain floats: the record is JSON in the ledger (numpy's scalars are not)
        return {"metric": self.metric, "value": round(float(self.value), 4), "parent": round(float(self.parent), 4),
                "threshold": round(float(self.threshold), 4), "items": int(self.items), "passed": self.passed}


def judge(*, metric: str, probe: tuple[float, float, int], new: tuple[float, float, int],
          retention: float) -> dict[str, Any]:
    """The gates' record from (candidate, parent, items) on the probe of old knowledge and on the
    held-out new knowledge."""
    cand_old, parent_old, n_old = probe
    cand_new, parent_new, n_new = new
    gates = [
        Gate("retention", metric, cand_old, parent_old, retention * parent_old, strict=False, items=n_old),
        # a perfect parent cannot be beaten: matching it is enough
        Gate("new_knowledge", metric, cand_new, parent_new, parent_new, strict=parent_new < 1.0, items=n_new),
    ]
    out: dict[str, Any] = {g.name: g.as_dict() for g in gates}
    out["passed"] = all(g.passed for g in gates)
    return out
