"""What training the router and the reasoner shares: question sets, subgraphs from the real store,
the training loop, and registration of the trained version in the model registry."""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from factloom.graph.linking import link_entities, strip_mentions
from factloom.graph.retrieval import guided_subgraphs, k_hop_subgraph, kb_predicates
from factloom.graph.store import Neo4jStore
from factloom.ledger import active_versions, register_version
from factloom.model.embedder import Embedder
from factloom.model.ewc import ElasticWeights
from factloom.model.features import (
    RelationFeatures,
    Sample,
    collate,
    make_sample,
    path_reaches,
    weak_relations,
)
from factloom.model.pipeline import load_model, plan_relations, relation_vocabulary, save_model
from factloom.model.reasoner import PathReasoner, ReasonerConfig, decode_answers
from factloom.model.router import RelationRouter, RouterConfig

__all__ = ["QA", "PATHQUESTION_SETS", "PQ_KB_FILES", "load_questions", "prepare", "fit", "hits_at_1",
           "parse_args", "train_main", "router_main", "reasoner_main", "kb_for", "choose_readout", "active_router"]

PATHQUESTION_SETS = ("PQ-2H", "PQ-3H", "PQL-2H", "PQL-3H")
PQ_KB_FILES = {"PQ-2H": "2H-kb.txt", "PQ-3H": "3H-kb.txt", "PQL-2H": "PQL2-KB.txt", "PQL-3H": "PQL3-KB.txt"}
METAQA_SETS = ("1hop", "2hop", "3hop")


@dataclass
class QA:
    question: str  # the topic entity in [brackets]
    answers: list[str]
    set: str
    relations: list[str] = field(default_factory=list)  # the gold relation of each hop, where the data names it


def kb_for(dataset: str, name: str) -> str:
    """The knowledge base a question set is asked over."""
    return "metaqa" if dataset == "metaqa" else name.lower()


def _bracket(question: str, topic: str) -> str:
    """Mark the topic entity as MetaQA does; the dataset names it (path's first element)."""
    pattern = re.compile(r"(?<![\w\[])" + re.escape(topic) + r"(?![\w\]])", re.IGNORECASE)
    return pattern.sub(lambda m: f"[{m.group(0)}]", question.strip(), count=1)


def question_file(dataset: str, data_dir: Path, name: str, split: str) -> Path:
    """The file holding a question set's ``split``: MetaQA's train and dev both come from its dev file."""
    if dataset == "pathquestion":
        return data_dir / f"{name}_{split}.txt"
    return data_dir / f"qa_{name.removesuffix('hop')}hop_{'test' if split == 'test' else 'dev'}.txt"


def question_sets(dataset: str, asked: Sequence[str] | None) -> list[str]:
    """The question sets ``asked`` (all of the dataset's when ``None``), or exit naming an unknown one."""
    known = PATHQUESTION_SETS if dataset == "pathquestion" else METAQA_SETS
    unknown = [n for n in asked or () if n not in known]
    if unknown:
        raise SystemExit(f"unknown question set(s) {', '.join(unknown)} for {dataset}; known: {', '.join(known)}")
    return list(asked) if asked else list(known)


def require_files(dataset: str, data_dir: Path, names: Sequence[str], splits: Sequence[str],
                  *, kb: bool = False) -> None:
    """Exit with one clear message when ``data_dir`` lacks a file the sets need (``kb``: and their KB)."""
    needed = [question_file(dataset, data_dir, n, s) for n in names for s in splits]
    if kb:
        needed += [data_dir / (PQ_KB_FILES[n] if dataset == "pathquestion" else "kb.txt") for n in names]
    missing = [str(p.relative_to(data_dir)) for p in dict.fromkeys(needed) if not p.is_file()]
    if missing:
        raise SystemExit(f"{data_dir} lacks {', '.join(missing)}: --data-dir must be laid out as "
                         f"../shared/data/{dataset} (see ../shared/README.md)")


def load_questions(dataset: str, data_dir: Path, name: str, split: str, *, seed: int = 0) -> list[QA]:
    """``split``: ``train`` | ``dev`` | ``test``. MetaQA's dev questions are split 80/20 (seeded)
    into train and dev; its ``test`` reads ``qa_Nhop_test.txt`` when present."""
    path = question_file(dataset, data_dir, name, split)
    if dataset == "pathquestion":
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            question, answer, chain = line.split("\t")[:3]
            main, _, alts = answer.partition("(")
            answers = list(dict.fromkeys([main.strip()] + [a for a in alts.rstrip(")").split("/") if a]))
            # subject#r1#e1#r2#…#answer, PQ's ending in #<end>#answer: the relations sit at odd places
            parts = chain.strip().split("#")
            relations = [parts[i] for i in range(1, len(parts) - 1, 2) if parts[i] != "<end>"]
            out.append(QA(_bracket(question, parts[0]), answers, name, relations))
        return out
    if dataset == "metaqa":
        lines = path.read_text(encoding="utf-8").splitlines()
        if split != "test":
            random.Random(seed).shuffle(lines)
            cut = int(0.8 * len(lines))
            lines = lines[:cut] if split == "train" else lines[cut:]
        return [QA(q, a.split("|"), name) for q, a in (ln.split("\t") for ln in lines if ln.strip())]
    raise ValueError(f"unknown dataset {dataset!r}; pathquestion or metaqa")


def load_jsonl(path: Path) -> list[QA]:
    """User-supplied pairs: one ``{"question": "… [Topic] …", "answers": ["…"]}`` per line."""
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            row = {}
        answers = row.get("answers")
        if not row.get("question") or not isinstance(answers, list) or not answers \
                or not all(isinstance(a, str) and a.strip() for a in answers):
            raise ValueError(f"{path}:{number}: needs 'question' and a non-empty 'answers' list of names")
        out.append(QA(row["question"], answers, "jsonl"))
    return out


def prepare(store: Neo4jStore, embedder: Embedder, kb: str, qas: Sequence[QA], *, hops: int = 3,
            max_edges: int = 5000, show: bool = True, desc: str = "subgraphs",
            router: RelationRouter | None = None, features: RelationFeatures | None = None,
            batch_size: int = 64) -> list[Sample]:
    """One training sample per question whose topic links: its subgraph from the store.

    Without a ``router`` the subgraph is the seeds' k-hop neighbourhood, cut at ``max_edges``.
    With a router that can plan, it is what serving retrieves: the relations the router picks hop
    by hop (:func:`~factloom.graph.retrieval.guided_subgraphs`), so the reasoner learns on the graphs
    it will read. On MetaQA's 3-hop questions the k-hop cut keeps only a few facts of each
    film two hops out: the answers and the question's relation path are mostly missing from it.
    """
    if router is not None and not router.can_plan:
        router = None
    names = sorted({a for qa in qas for a in qa.answers})
    ids = store.resolve(kb, names) if names else {}
    linked = []
    for qa in tqdm(qas, desc=f"{desc}: linking", unit="q", disable=not show):
        seeds = link_entities(store, kb=kb, question=qa.question, vector=None, limit=3)
        if seeds:
            linked.append((qa, seeds))
    texts = [strip_mentions(qa.question, [s.name for s in seeds]) or qa.question for qa, seeds in linked]
    encoded = [x for i in range(0, len(texts), 256) for x in embedder.encode_with_tokens(texts[i:i + 256])]
    graphs: list[Any] = [None] * len(linked)
    if router is not None:
        vocabulary = relation_vocabulary(features or RelationFeatures(embedder.encode), kb_predicates(store, kb))
        for start in tqdm(range(0, len(linked), batch_size), desc=f"{desc}: guided retrieval", unit="batch",
                          disable=not show):
            part = range(start, min(start + batch_size, len(linked)))
            plan = plan_relations(router, [encoded[i][0] for i in part], [encoded[i][1] for i in part], vocabulary,
                                  max_hops=hops)
            found = guided_subgraphs(store, kb=kb, seeds=[linked[i][1] for i in part], choose=plan.choose,
                                     guess=plan.guess, hops=plan.depth, max_edges=max_edges)
            for i, g in zip(part, found, strict=True):
                graphs[i] = g if g.edges else None  # nothing followed: k-hop, as serving does
    # paraphrases share their topic entity: one k-hop subgraph per seed set
    by_seeds: dict[tuple[str, ...], Any] = {}
    quiet = not show or router is not None
    for i, (_, seeds) in enumerate(tqdm(linked, desc=f"{desc}: k-hop", unit="q", disable=quiet)):
        if graphs[i] is None:
            key = tuple(s.entity_id for s in seeds)
            if key not in by_seeds:
                by_seeds[key] = k_hop_subgraph(store, kb=kb, seeds=seeds, hops=hops, max_edges=max_edges)
            graphs[i] = by_seeds[key]
    out = []
    for (qa, _), graph, (qvec, qtok) in zip(linked, graphs, encoded, strict=True):
        sample = make_sample(qa.question, qvec, graph, [ids[a] for a in qa.answers if a in ids], qtok=qtok,
                             relations=[(r, True) for r in qa.relations])
        if sample.relations and not path_reaches(sample, sample.relations):
            # the retrieved subgraph lacks a fact of the gold path: teach what the subgraph can answer
            sample.relations = []
        if not sample.relations:
            # no gold path in the data: the relation sequence that reaches the answers (of the set's
            # hop count when the set names one, MetaQA's "2hop")
            count = re.match(r"(\d)hop$", qa.set)
            sample.relations = weak_relations(sample, int(count.group(1)) if count else None)
        out.append(sample)
    return out


def fit(model: RelationRouter | PathReasoner, samples: Sequence[Sample], features: RelationFeatures, *,
        epochs: int, batch_size: int = 32, lr: float = 1e-3, seed: int = 0, show: bool = True,
        desc: str = "train", ewc: ElasticWeights | None = None) -> list[float]:
    """Adam on the model's own loss (plus ``ewc``'s penalty, when continuing a trained model);
    samples without a reachable answer teach nothing and are skipped."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    usable = [s for s in samples if s.answers]
    for s in usable:
        if not s.relations:
            s.relations = weak_relations(s)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    model.train()
    for epoch in range(epochs):
        rng.shuffle(usable)
        total = 0.0
        bar = tqdm(range(0, len(usable), batch_size), desc=f"{desc} {epoch + 1}/{epochs}", disable=not show)
        for start in bar:
            c = collate(usable[start:start + batch_size], features)
            out = model(c)
            loss = model.loss(c, out)  # type: ignore[arg-type]
            objective = loss if ewc is None else loss + ewc.penalty(model)
            optimiser.zero_grad()
            objective.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimiser.step()
            total += loss.item()
            bar.set_postfix(loss=f"{loss.item():.4f}")
        losses.append(total / max(1, len(range(0, len(usable), batch_size))))
    model.eval()
    return losses


@torch.no_grad()
def hits_at_1(reasoner: PathReasoner, samples: Sequence[Sample], features: RelationFeatures) -> float:
    if not samples:
        return float("nan")
    hits = 0
    for start in range(0, len(samples), 64):
        chunk = samples[start:start + 64]
        c = collate(chunk, features)
        for s, answers in zip(chunk, decode_answers(c, reasoner(c), top_k=1, paths_per_answer=0), strict=True):
            hits += bool(answers) and s.nodes.index(answers[0].entity_id) in s.answers
    return hits / len(samples)


def choose_readout(reasoner: PathReasoner, samples: Sequence[Sample], features: RelationFeatures, *,
                   limit: int = 1000, seed: int = 0) -> dict[str, float]:
    """Give ``reasoner`` the readout (``add`` or ``max``) with the better hits@1 on up to ``limit``
    of its training ``samples`` (a tie keeps ``add``, the aggregation it was trained with); returns
    both scores. Selection on training questions leaves the dev split untouched."""
    usable = [s for s in samples if s.answers]
    chosen = random.Random(seed).sample(usable, min(limit, len(usable)))
    scores = {}
    for readout in ("add", "max"):
        reasoner.set_readout(readout)
        scores[readout] = round(hits_at_1(reasoner, chosen, features), 4)
    reasoner.set_readout("max" if scores["max"] > scores["add"] else "add")
    return scores


def parse_args(kind: str, argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"factloom train {kind}",
                                description=f"train the {kind} on question–answer pairs over a kb in the store")
    p.add_argument("--dataset", choices=["pathquestion", "metaqa", "jsonl"], required=True)
    p.add_argument("--data-dir", type=Path, help="the dataset folder (../shared/data/<dataset>) or a JSONL file")
    p.add_argument("--set", help="question set: PQ-2H … PQL-3H, or 1hop/2hop/3hop (default: all)")
    p.add_argument("--kb", help="knowledge base in the store (default: the set's own, e.g. pq-2h, metaqa)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--sample", type=int, help="at most this many training questions per set (seeded)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


@dataclass
class Job:
    kb: str
    sets: list[str]
    train: list[QA] = field(default_factory=list)
    dev: list[QA] = field(default_factory=list)


def jobs_for(args: argparse.Namespace) -> list[Job]:
    if args.dataset == "jsonl":
        if not args.data_dir or not args.kb:
            raise SystemExit("--dataset jsonl needs --data-dir FILE.jsonl and --kb NAME")
        if not args.data_dir.is_file():
            raise SystemExit(f"{args.data_dir} is not a file")
        try:
            return [Job(args.kb, ["jsonl"], load_jsonl(args.data_dir))]
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
    data_dir = args.data_dir or Path(__file__).resolve().parents[2].parent / "shared" / "data" / args.dataset
    names = question_sets(args.dataset, [args.set] if args.set else None)
    require_files(args.dataset, data_dir, names, ("train", "dev"))
    jobs: dict[str, Job] = {}
    for name in names:
        kb = args.kb or kb_for(args.dataset, name)
        job = jobs.setdefault(kb, Job(kb, []))
        job.sets.append(name)
        train = load_questions(args.dataset, data_dir, name, "train", seed=args.seed)
        if args.sample:
            train = random.Random(args.seed).sample(train, min(args.sample, len(train)))
        job.train += train
        job.dev += load_questions(args.dataset, data_dir, name, "dev", seed=args.seed)[:300]
    return list(jobs.values())


def active_router(db: Any, kb: str) -> RelationRouter | None:
    """The kb's active router in the registry, loaded (``None`` when there is none)."""
    found = active_versions(db, ("router",)).get(("router", kb))
    model = load_model(Path(found[1])) if found else None
    return model if isinstance(model, RelationRouter) else None


def train_kb(kinds: Sequence[str], *, store: Neo4jStore, embedder: Embedder, db: Any, home: Path, job: Job,
             epochs: int, seed: int = 0, show: bool = True, watermark: datetime | None = None) -> dict[str, str]:
    """Train (and register) each of ``kinds`` for one kb; returns kind → version.

    The router learns on k-hop subgraphs; the reasoner on what the kb's active router (the one
    just trained, when ``kinds`` holds both) retrieves for each question, as at serving."""
    entities, facts = store.count(job.kb)
    if not facts:
        raise SystemExit(f"kb {job.kb!r} holds no facts: load it first (factloom ingest FILE --kb {job.kb})")
    features = RelationFeatures(embedder.encode)
    samples: dict[str, tuple[list[Sample], list[Sample]]] = {}
    versions = {}
    for kind in kinds:
        router = active_router(db, job.kb) if kind == "reasoner" else None
        retrieval = "guided" if router is not None and router.can_plan else "k-hop"
        if retrieval not in samples:
            train, dev = (prepare(store, embedder, job.kb, qas, show=show, desc=f"{job.kb} {part} ({retrieval})",
                                  router=router, features=features)
                          for part, qas in (("train", job.train), ("dev", job.dev)))
            samples[retrieval] = (train, dev)
        train, dev = samples[retrieval]
        t0 = time.perf_counter()
        model: RelationRouter | PathReasoner = RelationRouter(RouterConfig()) if kind == "router" \
            else PathReasoner(ReasonerConfig())
        losses = fit(model, train, features, epochs=epochs, seed=seed, show=show, desc=f"{kind} {job.kb}")
        metrics: dict[str, Any] = {"sets": job.sets, "train_questions": len(train), "epochs": epochs,
                                   "retrieval": retrieval, "final_loss": round(losses[-1], 5) if losses else None,
                                   "train_seconds": round(time.perf_counter() - t0, 1)}
        if isinstance(model, PathReasoner):
            metrics["train_hits_at_1_by_readout"] = choose_readout(model, train, features, seed=seed)
            metrics["readout"] = model.config.readout
            if dev:
                metrics["dev_hits_at_1"] = round(hits_at_1(model, dev, features), 4)
        artefact = home / "models" / f"{kind}-{job.kb}-{int(time.time())}.pt"
        save_model(model, artefact, kb=job.kb, metrics=metrics)
        versions[kind] = register_version(db, kind=kind, kb=job.kb, artefact=artefact, metrics=metrics,
                                          watermark=watermark)
        print(f"{kind} for kb {job.kb}: {versions[kind]} {json.dumps(metrics)}")
    return versions


def train_main(kinds: Sequence[str], argv: list[str]) -> int:
    """The entry point of ``factloom train router|reasoner`` (the CLI's settings, the real store)."""
    from factloom.config import get_settings
    from factloom.ledger import Database

    args = parse_args("/".join(kinds), argv)
    jobs = jobs_for(args)  # bad data fails before the models load
    settings = get_settings()
    store = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
    db = Database(settings.sql_url)
    embedder = Embedder(settings.embedder_path or None, device=settings.device)
    try:
        for job in jobs:
            train_kb(kinds, store=store, embedder=embedder, db=db, home=settings.home, job=job,
                     epochs=args.epochs, seed=args.seed)
    finally:
        store.close()
        db.dispose()
    return 0


def router_main(argv: list[str]) -> int:
    """``factloom train router --dataset pathquestion|metaqa|jsonl [--data-dir DIR] [--set NAME] [--kb KB]``."""
    return train_main(["router"], argv)


def reasoner_main(argv: list[str]) -> int:
    """``factloom train reasoner --dataset pathquestion|metaqa|jsonl [--data-dir DIR] [--set NAME] [--kb KB]``."""
    return train_main(["reasoner"], argv)
