"""What a learned version keeps beside its artefact (``NAME`` in the models directory):

- ``NAME.ewc``: its anchor weights and their diagonal Fisher information
  (:class:`~factloom.model.ewc.ElasticWeights`), what the next update is held near;
- ``NAME.probe.tsv``: a scorer's retention probe, facts of what it knows that it was *not* trained
  on (its held-out validation facts, then each update's held-out new facts), one
  ``subject<TAB>predicate<TAB>object`` a line. The retention gate measures old knowledge on them,
  as link prediction measures forgetting on old snapshots' test facts: on its own training facts a
  scorer's MRR is memorisation, which any update lowers as it learns more facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["ewc_path", "probe_path", "save_probe", "load_probe"]

Triple = tuple[str, str, str]


def ewc_path(artefact: Path) -> Path:
    return artefact.with_name(artefact.name + ".ewc")


def probe_path(artefact: Path) -> Path:
    return artefact.with_name(artefact.name + ".probe.tsv")


def save_probe(artefact: Path, triples: Sequence[Triple]) -> None:
    probe_path(artefact).write_text("".join(f"{s}\t{p}\t{o}\n" for s, p, o in triples), encoding="utf-8")


def load_probe(artefact: Path) -> list[Triple] | None:
    """The version's probe, or ``None`` for a version saved without one."""
    path = probe_path(artefact)
    if not path.exists():
        return None
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [(s, p, o) for s, p, o in rows]
