"""Training a kb's scorer data-parallel in several processes (PyTorch DDP), launched by ``torchrun``.

    torchrun --standalone --nproc-per-node 2 -m factloom.learn.distributed --kb KB   # one machine
    factloom train scorer --kb KB --nproc 2                                           # the same
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \\
        -m factloom.learn.distributed --kb KB                                          # two machines

Run without ``torchrun`` (``python -m factloom.learn.distributed --kb KB``) it is the same job in one
process, with no process group.

What each rank does:

1. **Rank 0 alone reads** the kb's accepted facts from Neo4j and the watermark from the ledger, and
   broadcasts them; the other ranks never open a store. One read, not one per rank: the graph changes
   all day, and ranks that read it at different moments could see different facts, hence different
   vocabularies and tables, which DDP refuses (or worse, mis-pairs). An error of that read (too few
   facts, Neo4j down) reaches every rank, so none waits for the others.
2. **Every rank** splits the facts and builds the scorer from the same seed (the split and the
   vocabulary order follow it) and trains it with
   :meth:`~factloom.model.scorer.ComplExScorer.fit` ``(distributed=True)``: each rank computes the loss
   of its share of every batch and DDP all-reduces the gradients (:mod:`factloom.model.distributed`),
   so every rank holds the same parameters, those one process would have learned (to floating-point
   rounding). Then the Fisher of the learned parameters on a sample of the training facts
   (:meth:`~factloom.model.scorer.ComplExScorer.fisher` ``(distributed=True)``): each rank measures
   every ``world``-th batch and the sums are all-reduced, so every rank holds the same Fisher.
   Each rank logs a digest of its parameters and Fisher (``rank R/W: parameters … fisher …``).
3. **Rank 0 alone** calibrates, measures (validation accuracy, and filtered MRR on the validation
   facts), saves the artefact with its probe and its EWC anchor (``NAME.ewc``, what the learner's
   next update is held near) and registers the version as the kb's active scorer, as
   ``factloom train scorer`` does. The others wait for it, then all leave the process group.

Backend: NCCL where CUDA is available (one GPU a rank, ``LOCAL_RANK``), else gloo on CPU;
``--backend`` overrides it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import distributed as dist

from factloom.learn.artefacts import ewc_path
from factloom.learn.continual import _known, _sample, committed_since, filtered_mrr
from factloom.learn.verification import finish_scorer, split_facts

__all__ = ["train_scorer_parallel", "main"]

Triple = tuple[str, str, str]


def _read(store: Any, db: Any, kb: str) -> tuple[list[Triple], datetime | None]:
    triples = list(store.accepted_triples(kb))
    _, watermark = committed_since(db, kb, None)
    return triples, watermark


def _shared(store: Any, db: Any, kb: str, rank: int, world: int) -> tuple[list[Triple], datetime | None]:
    """The kb's facts and watermark, read on rank 0 and broadcast; rank 0's error raised on every rank."""
    payload: list[Any] = [None]
    if rank == 0:
        try:
            payload = [("ok", *_read(store, db, kb))]
        except Exception as exc:  # every rank must hear of it, or the others wait in the broadcast
            if world == 1:
                raise
            payload = [("error", f"rank 0 could not read kb {kb!r}: {exc}", None)]
    if world > 1:
        dist.broadcast_object_list(payload, src=0)
    status, facts, watermark = payload[0]
    if status == "error":
        raise SystemExit(facts)
    return facts, watermark


def train_scorer_parallel(
    store: Any, db: Any, *, kb: str, models_dir: Path, rank: int = 64, epochs: int = 30, batch_size: int = 1000,
    valid_share: float = 0.1, seed: int = 0, negatives: int | None = None, fisher_facts: int = 5000,
    ewc_lambda: float = 10.0, device: torch.device | None = None,
) -> tuple[str | None, dict[str, Any]]:
    """Train ``kb``'s scorer on every rank of the default process group (alone without one), as the
    module says; rank 0 registers it. Returns (version, metrics) on rank 0, (``None``, ``{}``) elsewhere.

    ``store`` and ``db`` are only used on rank 0 (``None`` elsewhere will do). ``fisher_facts``: the
    training facts the Fisher is measured on (``FACTLOOM_LEARN_REPLAY``, as the learner samples them);
    ``ewc_lambda``: the anchor's λ (the learner sets its own when it loads it).
    """
    from factloom.model.distributed import digest, parameter_digest, process_group
    from factloom.model.ewc import ElasticWeights
    from factloom.model.scorer import ComplExScorer

    started = time.perf_counter()
    me, world = process_group()
    triples, watermark = _shared(store, db, kb, me, world)
    facts = split_facts(triples, kb=kb, valid_share=valid_share, seed=seed)
    torch.manual_seed(seed)  # the same tables on every rank and in a one-process run (DDP also broadcasts rank 0's)
    scorer = ComplExScorer.from_triples(facts.triples, rank=rank)
    scorer.model.to(device or torch.device("cpu"))
    fit_started = time.perf_counter()
    losses = scorer.fit(facts.train, epochs=epochs, batch_size=batch_size, seed=seed, progress=False,
                        negatives=negatives, distributed=True)
    fit_seconds = time.perf_counter() - fit_started
    fisher = scorer.fisher(_sample(_known(scorer), fisher_facts, seed), distributed=True)
    scorer.model.cpu()
    fisher = {name: f.cpu() for name, f in fisher.items()}
    # one write with its newline: the ranks share torchrun's stdout
    sys.stdout.write(f"rank {me}/{world}: parameters {parameter_digest(scorer.model)} fisher "
                     f"{digest(fisher.items())} fit {fit_seconds:.1f} s\n")
    sys.stdout.flush()
    if me != 0:
        if world > 1:
            dist.barrier()  # rank 0 saves and registers meanwhile
        return None, {}
    extra = {"processes": world, "backend": dist.get_backend() if world > 1 else None, "batch_size": batch_size,
             "valid_mrr": round(filtered_mrr(scorer, facts.valid[:1000]), 4),
             "fit_seconds": round(fit_seconds, 1)}
    try:
        version, metrics = finish_scorer(db, scorer, facts, kb=kb, epochs=epochs, losses=losses,
                                         models_dir=models_dir, watermark=watermark, started=started, extra=extra)
        artefact = Path(_artefact(db, version))
        ElasticWeights.from_model(scorer.model, fisher, lam=ewc_lambda).save(ewc_path(artefact))
    finally:
        if world > 1:
            dist.barrier()
    return version, metrics


def _artefact(db: Any, version: str) -> str:
    from factloom.ledger import ModelVersion

    with db.session() as session:
        row = session.get(ModelVersion, version)
        assert row is not None
        return str(row.artefact)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchrun --nproc-per-node N -m factloom.learn.distributed",
        description="train a kb's plausibility scorer data-parallel (PyTorch DDP) and register it (rank 0)")
    p.add_argument("--kb", required=True)
    p.add_argument("--rank", type=int, default=64, help="the embedding rank (ComplEx dimension), not a process's")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=1000, help="rows a step over all processes together")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--negatives", type=int, default=None,
                   help="a sampled softmax of this many entities a batch (default: every entity)")
    p.add_argument("--fisher-facts", type=int, default=None,
                   help="training facts the EWC Fisher is measured on (default FACTLOOM_LEARN_REPLAY)")
    p.add_argument("--backend", choices=["gloo", "nccl"], default=None,
                   help="default: nccl where CUDA is available, else gloo")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from factloom.config import get_settings

    settings = get_settings()
    launched = dist.is_torchelastic_launched()
    device = torch.device("cpu")
    if launched:
        backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # torchrun's contract
            torch.cuda.set_device(device)
        dist.init_process_group(backend)
    rank = dist.get_rank() if launched else 0
    store = db = None
    try:
        if rank == 0:
            from factloom.learn.verification import _open

            store, db, _ = _open()
        version, metrics = train_scorer_parallel(
            store, db, kb=args.kb, models_dir=settings.models_dir, rank=args.rank, epochs=args.epochs,
            batch_size=args.batch_size, seed=args.seed, negatives=args.negatives,
            fisher_facts=args.fisher_facts or settings.learn_replay, ewc_lambda=settings.learn_scorer_ewc_lambda,
            device=device)
    finally:
        if store is not None:
            store.close()
        if db is not None:
            db.dispose()
        if launched:
            dist.destroy_process_group()
    if version is not None:
        print(f"scorer for kb {args.kb}: {version} (active) {json.dumps(metrics)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
