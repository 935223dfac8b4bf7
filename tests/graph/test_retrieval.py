"""Linking, k-hop and router-guided retrieval against a real Neo4j."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from factloom.config import Settings
from factloom.graph import FactWrite, InvalidGraphInput, Neo4jStore, fact_id_for, retrieval
from factloom.graph import queries as q
from factloom.graph.linking import link_entities, lucene_escape, strip_mentions
from factloom.graph.retrieval import guided_subgraphs, k_hop_subgraph, kb_predicates
from factloom.graph.types import Seed
from factloom.model.embedder import Embedder

pytestmark = pytest.mark.integration

PAST = datetime.now(UTC) - timedelta(days=365)
FACTS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("Blade Runner", "directed_by", "Ridley Scott", {}),
    ("Blade Runner", "starred_actors", "Harrison Ford", {}),
    ("Alien", "directed_by", "Ridley Scott", {}),
    ("Alien", "release_year", "1979", {}),
    ("Witness", "starred_actors", "Harrison Ford", {}),
    ("Witness", "directed_by", "Peter Weir", {}),
    # closed a year ago: invisible now, visible "as of" before then
    ("Blade Runner", "release_year", "1992", {"valid_from": PAST - timedelta(days=30), "valid_to": PAST}),
]
HUB_FILMS = 60  # films of genre "Drama", a hub next to the seed


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(None, device="cpu")


@pytest.fixture(scope="module")
def store(settings: Settings, neo4j_service: object) -> Iterator[Neo4jStore]:
    store = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
    store.apply_schema()
    yield store
    store.close()


def _write(store: Neo4jStore, kb: str, embedder: Embedder, facts: list[tuple[str, str, str, dict[str, Any]]]) -> None:
    store.write_facts(
        kb, [FactWrite(fact_id_for(kb, s, p, o), s, p, o, source="test", **kw) for s, p, o, kw in facts],
        embed=embedder.embed,
    )


@pytest.fixture(scope="module")
def kbs(store: Neo4jStore, embedder: Embedder) -> Iterator[tuple[str, str]]:
    kb, other = f"t-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    hub = [("Witness", "has_genre", "Drama", {})] + [
        (f"Drama Film {i}", "has_genre", "Drama", {}) for i in range(HUB_FILMS)
    ]
    _write(store, kb, embedder, FACTS + hub)
    # the same names in another kb, with a fact the first kb lacks
    _write(store, other, embedder, [("Blade Runner", "directed_by", "Someone Else", {}),
                                    ("Ridley Scott", "born_in", "South Shields", {})])
    yield kb, other
    store.drop_kb(kb)
    store.drop_kb(other)


def _seed(store: Neo4jStore, kb: str, name: str) -> Seed:
    seeds = link_entities(store, kb=kb, question=f"[{name}]", vector=None)
    assert len(seeds) == 1
    return seeds[0]


def _triples(graph: Any) -> set[tuple[str, str, str]]:
    return {(graph.names[e.source_id], e.predicate, graph.names[e.target_id]) for e in graph.edges}


def test_helpers() -> None:
    assert strip_mentions("who directed [Blade Runner]?") == "who directed ?"
    assert strip_mentions("who directed blade runner", ["Blade Runner"]) == "who directed"
    assert lucene_escape('AC/DC: "live" (1991) AND more') == r'AC\/DC\: \"live\" \(1991\) and more'


def test_linking_bracketed_ngram_fulltext_vector(store: Neo4jStore, kbs: tuple[str, str], embedder: Embedder) -> None:
    kb, _ = kbs
    exact = link_entities(store, kb=kb, question="who directed [blade runner]", vector=None)
    assert [(s.name, s.how, s.score) for s in exact] == [("Blade Runner", "exact", 1.0)]
    assert link_entities(store, kb=kb, question="who directed [No Such Film]", vector=None) == []
    ngram = link_entities(store, kb=kb, question="who directed blade runner?", vector=None)
    assert [(s.name, s.how) for s in ngram] == [("Blade Runner", "exact")]
    full = link_entities(store, kb=kb, question="films with harrison", vector=None)
    assert full and full[0].name == "Harrison Ford" and full[0].how == "fulltext"
    question = "motion pictures by mr scot"
    vector = link_entities(store, kb=kb, question=question, vector=embedder.embed([question])[0])
    assert vector and all(s.how == "vector" for s in vector)


def test_k_hop_bounds_and_directions(store: Neo4jStore, kbs: tuple[str, str]) -> None:
    kb, _ = kbs
    seed = _seed(store, kb, "Alien")
    one = k_hop_subgraph(store, kb=kb, seeds=[seed], hops=1, max_edges=100)
    assert _triples(one) == {("Alien", "directed_by", "Ridley Scott"), ("Alien", "release_year", "1979")}
    assert not one.truncated
    two = k_hop_subgraph(store, kb=kb, seeds=[seed], hops=2, max_edges=100)
    assert ("Blade Runner", "directed_by", "Ridley Scott") in _triples(two)  # followed backwards
    assert len({e.fact_id for e in two.edges}) == len(two.edges)
    three = k_hop_subgraph(store, kb=kb, seeds=[seed], hops=3, max_edges=100)
    assert ("Blade Runner", "starred_actors", "Harrison Ford") in _triples(three)
    assert ("Witness", "starred_actors", "Harrison Ford") not in _triples(three)  # 4 hops away
    cut = k_hop_subgraph(store, kb=kb, seeds=[seed], hops=3, max_edges=3)
    assert len(cut.edges) == 3 and cut.truncated


def test_facts_back_to_visited_entities_are_kept(store: Neo4jStore, embedder: Embedder) -> None:
    # "the mother of Ann's son" is Ann; a self-loop; two neighbours of the seed related to each other
    kb = f"t-{uuid.uuid4().hex[:10]}"
    family = [("Ann", "son", "Bob", {}), ("Bob", "mother", "Ann", {}), ("Ann", "spouse", "Carl", {}),
              ("Carl", "father_of", "Bob", {}), ("Ann", "knows", "Ann", {}), ("Bob", "friend", "Dora", {})]
    _write(store, kb, embedder, family)
    try:
        seed = _seed(store, kb, "Ann")
        one = k_hop_subgraph(store, kb=kb, seeds=[seed], hops=1, max_edges=100)
        assert _triples(one) == {("Ann", "son", "Bob"), ("Bob", "mother", "Ann"), ("Ann", "spouse", "Carl"),
                                 ("Ann", "knows", "Ann")}
        two = k_hop_subgraph(store, kb=kb, seeds=[seed], hops=2, max_edges=100)
        assert _triples(two) == {(s, p, o) for s, p, o, _ in family}  # Carl→Bob joins two hop-1 nodes
        assert len({e.fact_id for e in two.edges}) == len(two.edges)  # still each fact once
    finally:
        store.drop_kb(kb)


def test_hub_stays_bounded(store: Neo4jStore, kbs: tuple[str, str]) -> None:
    kb, _ = kbs
    graph = k_hop_subgraph(store, kb=kb, seeds=[_seed(store, kb, "Witness")], hops=3, max_edges=40)
    assert len(graph.edges) <= 40 and graph.truncated
    assert ("Witness", "directed_by", "Peter Weir") in _triples(graph)  # hop 1 always first


def test_closed_fact_only_as_of_the_past(store: Neo4jStore, kbs: tuple[str, str]) -> None:
    kb, _ = kbs
    seed = _seed(store, kb, "Blade Runner")
    closed = ("Blade Runner", "release_year", "1992")
    assert closed not in _triples(k_hop_subgraph(store, kb=kb, seeds=[seed], hops=1, max_edges=100))
    then = k_hop_subgraph(store, kb=kb, seeds=[seed], hops=1, max_edges=100, as_of=PAST - timedelta(days=1))
    assert closed in _triples(then)
    naive = (PAST - timedelta(days=1)).replace(tzinfo=None)  # read as UTC
    assert closed in _triples(k_hop_subgraph(store, kb=kb, seeds=[seed], hops=1, max_edges=100, as_of=naive))
    before = k_hop_subgraph(store, kb=kb, seeds=[seed], hops=1, max_edges=100, as_of=PAST - timedelta(days=60))
    assert closed not in _triples(before)  # not yet valid


def test_other_kb_is_never_crossed(store: Neo4jStore, kbs: tuple[str, str], embedder: Embedder) -> None:
    kb, other = kbs
    graph = k_hop_subgraph(store, kb=kb, seeds=[_seed(store, kb, "Blade Runner")], hops=3, max_edges=1000)
    names = set(graph.names.values())
    assert "Someone Else" not in names and "South Shields" not in names
    assert link_entities(store, kb=kb, question="[South Shields]", vector=None) == []
    question = "South Shields"
    vector = link_entities(store, kb=kb, question=question, vector=embedder.embed([question])[0])
    assert all(s.name != "South Shields" for s in vector)
    # a seed id from the other kb expands to nothing here
    foreign = _seed(store, other, "Blade Runner")
    assert k_hop_subgraph(store, kb=kb, seeds=[foreign], hops=2, max_edges=100).edges == []


def _following(per_hop: list[list[tuple[str, bool]]], asked: list[tuple[int, int, dict[tuple[str, bool], int]]]):  # type: ignore[no-untyped-def]
    def choose(question: int, hop: int, present: dict[tuple[str, bool], int]) -> list[tuple[str, bool]]:
        asked.append((question, hop, present))
        return [k for k in per_hop[hop] if k in present] if hop < len(per_hop) else []
    return choose


def test_guided_follows_only_the_chosen_relations(store: Neo4jStore, kbs: tuple[str, str]) -> None:
    kb, _ = kbs
    assert kb_predicates(store, kb) == ["directed_by", "has_genre", "release_year", "starred_actors"]
    asked: list[tuple[int, int, dict[tuple[str, bool], int]]] = []
    # "the actors of the films of Alien's director", and in the same call "Witness's genre"
    plan = [[("directed_by", True), ("has_genre", True)], [("directed_by", False)], [("starred_actors", True)]]
    alien, witness = guided_subgraphs(store, kb=kb, seeds=[[_seed(store, kb, "Alien")], [_seed(store, kb, "Witness")]],
                                      choose=_following(plan, asked), hops=3, max_edges=100)
    assert _triples(alien) == {("Alien", "directed_by", "Ridley Scott"),
                               ("Blade Runner", "directed_by", "Ridley Scott"),
                               ("Blade Runner", "starred_actors", "Harrison Ford")}
    assert ("Witness", "starred_actors", "Harrison Ford") not in _triples(alien)  # not a chosen relation there
    # Witness: back from its director to itself (a fact already fetched still leads on), then its actors
    assert _triples(witness) == {("Witness", "directed_by", "Peter Weir"), ("Witness", "has_genre", "Drama"),
                                 ("Witness", "starred_actors", "Harrison Ford")}
    # the choice is among the relations around each question's frontier, current facts only, each
    # with the facts following it would read there (Blade Runner's closed release year is not one)
    hop0 = {q: present for q, hop, present in asked if hop == 0}
    assert hop0[0] == {("directed_by", True): 1, ("release_year", True): 1}
    assert hop0[1] == {("directed_by", True): 1, ("has_genre", True): 1, ("starred_actors", True): 1}
    hop1 = {q: present for q, hop, present in asked if hop == 1}
    assert hop1[0] == {("directed_by", False): 2}  # Ridley Scott's films
    assert hop1[1] == {("directed_by", False): 1, ("has_genre", False): 1 + HUB_FILMS}  # Peter Weir, Drama
    assert not alien.truncated
    # each hop asks once per question
    assert sorted(hop for _, hop, _ in asked) == [0, 0, 1, 1, 2, 2]


def test_guided_samples_a_hub_and_reads_only_entities_around_a_chosen_relation(
        store: Neo4jStore, kbs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    kb, _ = kbs
    fetched: list[set[str]] = []  # the frontier entities each guided hop reads around
    run = store.run

    def recording(query: str, **params: Any) -> Any:
        if query is q.GUIDED_HOP:
            fetched.append({item["id"] for item in params["items"]})
        return run(query, **params)

    monkeypatch.setattr(store, "run", recording)
    monkeypatch.setattr(retrieval, "HUB_SCAN", 10)  # "Drama" (61 facts) is now a hub
    asked: list[tuple[int, int, dict[tuple[str, bool], int]]] = []
    plan = [[("directed_by", True), ("has_genre", True)], [("directed_by", False)]]
    witness, = guided_subgraphs(store, kb=kb, seeds=[[_seed(store, kb, "Witness")]],
                                choose=_following(plan, asked), hops=2, max_edges=100)
    assert _triples(witness) == {("Witness", "directed_by", "Peter Weir"), ("Witness", "has_genre", "Drama")}
    # the hub's first 10 facts read, their count scaled to its degree: the same 61
    assert asked[1] == (0, 1, {("directed_by", False): 1, ("has_genre", False): 1 + HUB_FILMS})
    # the second hop reads around Peter Weir only: no film of Drama's is directed by it
    weir, drama = (_seed(store, kb, name).entity_id for name in ("Peter Weir", "Drama"))
    assert weir in fetched[1] and drama not in fetched[1]


@pytest.fixture
def frontier_items(store: Neo4jStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many frontier entities each relations query asks about, in order."""
    items: list[int] = []
    run = store.run

    def counting(query: str, **params: Any) -> Any:
        if query is q.FRONTIER_RELATIONS:
            items.append(len(params["items"]))
        return run(query, **params)

    monkeypatch.setattr(store, "run", counting)
    return items


def test_guided_stops_each_question_at_its_own_depth(store: Neo4jStore, kbs: tuple[str, str],
                                                     frontier_items: list[int]) -> None:
    kb, _ = kbs
    plan = [[("directed_by", True), ("has_genre", True)], [("directed_by", False)], [("starred_actors", True)]]
    asked: list[tuple[int, int, dict[tuple[str, bool], int]]] = []
    alien, witness = guided_subgraphs(store, kb=kb, seeds=[[_seed(store, kb, "Alien")], [_seed(store, kb, "Witness")]],
                                      choose=_following(plan, asked), hops=[3, 1], max_edges=100)
    assert _triples(alien) == {("Alien", "directed_by", "Ridley Scott"),
                               ("Blade Runner", "directed_by", "Ridley Scott"),
                               ("Blade Runner", "starred_actors", "Harrison Ford")}
    assert _triples(witness) == {("Witness", "directed_by", "Peter Weir"), ("Witness", "has_genre", "Drama")}
    # Witness is asked once; after its one hop its answers (Peter Weir, Drama) are not looked around
    assert sorted((question, hop) for question, hop, _ in asked) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert frontier_items == [2, 1, 2]  # both seeds; Ridley Scott; Alien and Blade Runner
    frontier_items.clear()
    one, = guided_subgraphs(store, kb=kb, seeds=[[_seed(store, kb, "Witness")]],
                            choose=_following(plan, []), hops=1, max_edges=100)
    assert frontier_items == [1] and len(one.edges) == 2
    with pytest.raises(InvalidGraphInput, match="2 hop counts for 1 questions"):
        guided_subgraphs(store, kb=kb, seeds=[[_seed(store, kb, "Witness")]], choose=_following(plan, []),
                         hops=[1, 2], max_edges=100)


def test_guided_guesses_the_last_hop_and_asks_only_where_the_guess_reaches_nothing(
        store: Neo4jStore, kbs: tuple[str, str], frontier_items: list[int]) -> None:
    kb, _ = kbs
    plan = [[("directed_by", True), ("has_genre", True)], [("directed_by", False)], [("starred_actors", True)]]
    asked: list[tuple[int, int, dict[tuple[str, bool], int]]] = []
    guesses = {0: [("starred_actors", True)], 1: [("release_year", True)]}  # Witness has no release year here
    seeds = [[_seed(store, kb, "Alien")], [_seed(store, kb, "Witness")]]
    alien, witness = guided_subgraphs(store, kb=kb, seeds=seeds, choose=_following(plan, asked),
                                      guess=lambda question, hop: guesses[question], hops=[3, 1], max_edges=100)
    # Alien's third hop follows the guess unasked; the same facts as when it is asked
    assert _triples(alien) == {("Alien", "directed_by", "Ridley Scott"),
                               ("Blade Runner", "directed_by", "Ridley Scott"),
                               ("Blade Runner", "starred_actors", "Harrison Ford")}
    # Witness's guess reached nothing: it was asked, and chosen for, after all
    assert _triples(witness) == {("Witness", "directed_by", "Peter Weir"), ("Witness", "has_genre", "Drama")}
    assert sorted((question, hop) for question, hop, _ in asked) == [(0, 0), (0, 1), (1, 0)]
    assert frontier_items == [1, 1, 1]  # Alien's seed; Witness's, only after its guess; Ridley Scott
    frontier_items.clear()
    nothing, = guided_subgraphs(store, kb=kb, seeds=[seeds[1]], choose=lambda q, h, present: [],
                                guess=lambda question, hop: [("release_year", True)], hops=1, max_edges=100)
    assert nothing.edges == [] and frontier_items == [1]


def test_guided_passes_back_through_visited_entities(store: Neo4jStore, embedder: Embedder) -> None:
    kb = f"t-{uuid.uuid4().hex[:10]}"
    closed = {"valid_from": PAST - timedelta(days=30), "valid_to": PAST}
    _write(store, kb, embedder, [("Ann", "son", "Bob", {}), ("Bob", "mother", "Ann", {}), ("Ann", "spouse", "Carl", {}),
                                 ("Carl", "born_in", "Leeds", {}), ("Ann", "born_in", "York", closed)])
    try:
        seeds = [[_seed(store, kb, "Ann")]]
        # "the spouse of the mother of Ann's son" walks back through Ann; the earlier fact is fetched once
        plan = [[("son", True)], [("mother", True), ("son", False)], [("spouse", True)], [("born_in", True)]]
        graph, = guided_subgraphs(store, kb=kb, seeds=seeds, choose=_following(plan, []), hops=4, max_edges=100)
        assert _triples(graph) == {("Ann", "son", "Bob"), ("Bob", "mother", "Ann"), ("Ann", "spouse", "Carl"),
                                   ("Carl", "born_in", "Leeds")}
        assert len({e.fact_id for e in graph.edges}) == len(graph.edges)
        then, = guided_subgraphs(store, kb=kb, seeds=seeds, choose=lambda q, h, present: [("born_in", True)],
                                 hops=1, max_edges=100, as_of=PAST - timedelta(days=1))
        assert _triples(then) == {("Ann", "born_in", "York")}  # a closed fact, as of the past
        cut, = guided_subgraphs(store, kb=kb, seeds=seeds, choose=_following(plan, []), hops=4, max_edges=2)
        assert len(cut.edges) == 2 and cut.truncated
        nothing, = guided_subgraphs(store, kb=kb, seeds=seeds, choose=lambda q, h, present: [], hops=3, max_edges=100)
        assert nothing.edges == [] and not nothing.truncated
    finally:
        store.drop_kb(kb)
