"""Type constraints: the types each predicate takes as subject and object.

Learned from the accepted graph — a predicate's domain (range) is the set of types seen on its
subjects (objects) in at least ``min_support`` accepted facts — and overridden per predicate by a
declared schema (``{"predicate": {"domain": [...], "range": [...]}}``, e.g. read from a JSON file).
An entity of unknown type, or a predicate with no learned or declared constraint, makes the verifier
abstain: absence of evidence is not a violation. A learned constraint is only as good as the facts it
was learned from, so its violation sends the fact to review (p 0.2); a declared one is a rule, and its
violation is near-certain falsity (p 0.02).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from factloom.verify.base import Claim, GraphView, VerifierResult

__all__ = ["TypeConstraints", "TypeVerifier", "load_schema"]

Schema = Mapping[str, Mapping[str, Sequence[str]]]


def load_schema(path: Path) -> dict[str, dict[str, list[str]]]:
    """Read a declared schema file; raises ``ValueError`` on a malformed one."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a schema is an object of predicate -> {{domain, range}}")
    out: dict[str, dict[str, list[str]]] = {}
    for pred, spec in data.items():
        if not isinstance(spec, dict) or not set(spec) <= {"domain", "range"}:
            raise ValueError(f"{path}: predicate {pred!r} needs only 'domain' and/or 'range' lists")
        out[str(pred)] = {k: [str(t) for t in v] for k, v in spec.items()}
    return out


class TypeConstraints:
    """Domain and range per predicate, learned from accepted facts and overridable by a schema.

    Args:
        min_support: accepted facts a type needs on a predicate's side to count as allowed.
    """

    def __init__(self, min_support: int = 1) -> None:
        self.min_support = min_support
        self.domain: dict[str, frozenset[str]] = {}
        self.range: dict[str, frozenset[str]] = {}
        self.declared: set[tuple[str, str]] = set()  # (predicate, "domain" | "range") set by a schema

    def __repr__(self) -> str:
        return f"{type(self).__name__}(predicates={len(self.domain)}, min_support={self.min_support})"

    def learn(
        self, facts: Iterable[tuple[str, str, str]], entity_types: Mapping[str, Sequence[str]]
    ) -> TypeConstraints:
        dom: dict[str, Counter[str]] = {}
        rng: dict[str, Counter[str]] = {}
        for s, p, o in facts:
            dom.setdefault(p, Counter()).update(entity_types.get(s, ()))
            rng.setdefault(p, Counter()).update(entity_types.get(o, ()))
        for p, c in dom.items():
            self.domain[p] = frozenset(t for t, n in c.items() if n >= self.min_support)
        for p, c in rng.items():
            self.range[p] = frozenset(t for t, n in c.items() if n >= self.min_support)
        return self

    def learn_counts(
        self, domain: Mapping[str, Mapping[str, int]], range_: Mapping[str, Mapping[str, int]]
    ) -> TypeConstraints:
        """Learn from per-predicate type counts (as ``Neo4jStore.type_counts`` aggregates them)."""
        for p, c in domain.items():
            self.domain[p] = frozenset(t for t, n in c.items() if n >= self.min_support)
        for p, c in range_.items():
            self.range[p] = frozenset(t for t, n in c.items() if n >= self.min_support)
        return self

    def override(self, schema: Schema) -> TypeConstraints:
        for p, spec in schema.items():
            if "domain" in spec:
                self.domain[p] = frozenset(spec["domain"])
                self.declared.add((p, "domain"))
            if "range" in spec:
                self.range[p] = frozenset(spec["range"])
                self.declared.add((p, "range"))
        return self


class TypeVerifier:
    """Is the subject of a type the predicate takes, and the object too?"""

    name = "types"
    version = "types-1"

    def __init__(self, constraints: TypeConstraints, entity_types: Mapping[str, Sequence[str]]) -> None:
        self.constraints = constraints
        self.entity_types = entity_types

    def check(self, claims: Sequence[Claim], graph: GraphView, now: datetime) -> list[VerifierResult]:
        return [self._check_one(c) for c in claims]

    def _check_one(self, claim: Claim) -> VerifierResult:
        problems = []
        judged = declared = False
        for side, part, entity, allowed in (
            ("subject", "domain", claim.subject, self.constraints.domain.get(claim.predicate)),
            ("object", "range", claim.object, self.constraints.range.get(claim.predicate)),
        ):
            types = set(self.entity_types.get(entity, ()))
            if not allowed or not types:
                continue
            judged = True
            if not types & allowed:
                rule = (claim.predicate, part) in self.constraints.declared
                declared |= rule
                problems.append(f"{side} '{entity}' is {', '.join(sorted(types))}, '{claim.predicate}' "
                                f"{'must take' if rule else 'has only taken'} {', '.join(sorted(allowed)[:5])}")
        if not judged:
            return VerifierResult(self.name, None, "no type constraint applies", model_version=self.version)
        if problems:
            p = 0.02 if declared else 0.2
            return VerifierResult(self.name, p, "type violation: " + "; ".join(problems), score=p,
                                  details={"rule": "types", "declared": declared}, model_version=self.version)
        return VerifierResult(self.name, 0.9, "types fit the predicate", score=0.9,
                              details={"rule": "types"}, model_version=self.version)
