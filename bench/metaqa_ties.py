"""What MetaQA's 1-hop questions allow on this KB, from ``kb.txt`` alone (no platform, no model).

The KB merges films of the same name into one entity, so "who directed [Hamlet]" has seven answers
while the question's gold names the director of one Hamlet. Per question: ``reachable`` when a
relation of the topic entity leads to a gold answer; the ceiling of a reader that picks that relation
perfectly and then one of its answers at random is the share of gold among them (best relation).
"""

from __future__ import annotations

import time
from collections import defaultdict

from _common import REPO, parser, write_result

from factloom.graph.linking import bracketed_mentions


def main() -> None:
    p = parser("metaqa_ties", __doc__ or "")
    p.set_defaults(out=REPO / "bench" / "results" / "metaqa-ties.json")
    args = p.parse_args()
    started = time.perf_counter()
    root = args.data_dir / "metaqa"
    if not (root / "kb.txt").exists() or not (root / "qa_1hop_dev.txt").exists():
        raise SystemExit(f"{root} lacks kb.txt or qa_1hop_dev.txt: --data-dir must hold metaqa/")
    objects: dict[tuple[str, str], set[str]] = defaultdict(set)
    for line in (root / "kb.txt").read_text(encoding="utf-8").splitlines():
        s, r, o = line.lower().split("|")
        objects[(s, r)].add(o)
        objects[(o, f"{r}^-1")].add(s)
    by_entity: dict[str, list[set[str]]] = defaultdict(list)
    for (entity, _), answers in objects.items():
        by_entity[entity].append(answers)
    questions = reachable = tied = 0
    ceiling = 0.0
    for line in (root / "qa_1hop_dev.txt").read_text(encoding="utf-8").splitlines():
        question, answers = line.split("\t")
        topic = bracketed_mentions(question)
        gold = {a.lower() for a in answers.split("|")}
        questions += 1
        rates = [len(found & gold) / len(found) for found in by_entity.get(topic[0].lower() if topic else "", [])
                 if found & gold]
        if rates:
            reachable += 1
            ceiling += max(rates)
            tied += max(rates) < 1.0
    metrics = {"questions": questions, "reachable": round(reachable / questions, 4),
               "perfect_relation_random_pick": round(ceiling / questions, 4),
               "reachable_with_other_answers": round(tied / questions, 4)}
    write_result(args.out, benchmark="metaqa-ties", dataset="metaqa", split="dev-1hop", settings={},
                 metrics=metrics, started=started)
    print(f"1-hop dev: {questions} questions, reachable {metrics['reachable']}, a perfect relation choice with a "
          f"random pick among its answers {metrics['perfect_relation_random_pick']}")


if __name__ == "__main__":
    main()
