"""What the admin graphs are built from, without a browser: paths as walked, hubs as summaries."""

from __future__ import annotations

from factloom.graph.explore import MoreOf, Neighbourhood, share
from factloom.graph.types import Edge
from factloom.platform.admin.visuals import neighbourhood_elements
from factloom.platform.query.paths import walk
from factloom.platform.query.schemas import PathStepOut


def fact(fid: str, s: str, p: str, o: str) -> PathStepOut:
    return PathStepOut(fact_id=fid, subject=s, predicate=p, object=o)


def test_a_path_is_walked_from_the_seed_each_step_naming_where_it_arrives() -> None:
    path = [fact("f1", "Blade Runner", "directed_by", "Ridley Scott"),
            fact("f2", "Black Rain", "directed_by", "Ridley Scott"),
            fact("f3", "Black Rain", "has_genre", "Action")]
    steps = walk(path, ["blade runner"])
    assert [(s.start, s.predicate, s.end, s.forward) for s in steps] == [
        ("Blade Runner", "directed_by", "Ridley Scott", True),
        ("Ridley Scott", "directed_by", "Black Rain", False),
        ("Black Rain", "has_genre", "Action", True),
    ]
    # from the other end: the first fact is walked backwards
    assert [(s.start, s.end, s.forward) for s in walk(path[:1], ["Ridley Scott"])] == [
        ("Ridley Scott", "Blade Runner", False)]
    # no seed on the path: it starts where the first fact does not meet the second
    assert [s.start for s in walk(path, [])] == ["Blade Runner", "Ridley Scott", "Black Rain"]
    assert walk([], ["x"]) == []


def test_small_relations_are_drawn_whole_and_big_ones_share_the_rest() -> None:
    assert share([3, 60, 1], 25) == [3, 21, 1]
    assert share([40, 30], 25) == [13, 12]
    assert share([5, 5], 25) == [5, 5]
    assert share([], 25) == []


def test_a_summarised_relation_is_one_node_tied_to_its_entity() -> None:
    graph = Neighbourhood(
        names={"d": "Busy Director", "f": "Film <script>"},
        edges=[Edge(fact_id="x", source_id="f", target_id="d", predicate="directed_by", sources=("s",))],
        truncated=True, more=[MoreOf("d", "directed_by", False, shown=1, total=60)],
    )
    elements = {e["data"]["id"]: e for e in neighbourhood_elements(graph, focus=["d"])}
    more = elements["more:d:directed_by:in"]
    assert more["data"]["label"] == "+59 more ←directed_by–" and more["classes"] == "more"
    assert (more["data"]["entity"], more["data"]["shown"], more["data"]["outgoing"]) == ("d", 1, False)
    tie = elements["to-more:d:directed_by:in"]
    assert (tie["data"]["source"], tie["data"]["target"]) == ("more:d:directed_by:in", "d")
    assert elements["f"]["data"]["label"] == "Film <script>"  # escaped by the JSON block, drawn on a canvas
