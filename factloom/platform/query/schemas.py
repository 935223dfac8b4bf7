"""Request and response bodies of ``POST /v1/query``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from factloom.config import DEFAULT_KB
from factloom.platform.ingest.schemas import KbName
from factloom.platform.types import Instant, Name

__all__ = ["QueryIn", "QueryOut", "AnswerOut", "PathStepOut", "SeedOut", "Timings", "ModelVersions",
           "SubgraphOut"]


class QueryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: Name = Field(
        description="a natural-language question; put entity names in [brackets] to link them exactly",
        examples=["which languages are the films directed by [Joel Zwick] in"],
    )
    kb: KbName = DEFAULT_KB
    top_k: int = Field(default=5, ge=1, le=50)
    max_hops: int | None = Field(default=None, ge=1, le=3, description="null: the server's limit")
    as_of: Instant | None = Field(
        default=None, description="answer from the facts valid at this moment (null: now), with its time zone"
    )
    reasoner: Literal["learned", "baseline"] | None = Field(
        default=None, description="null: the learned models when some are registered for the kb, else the baseline"
    )
    include_subgraph: bool = Field(default=False, description="list the entities of the subgraphs read")


class PathStepOut(BaseModel):
    fact_id: str
    subject: str
    predicate: str
    object: str
    sources: list[str] = Field(default_factory=list, description="who asserted this fact")


class AnswerOut(BaseModel):
    entity_id: str
    name: str
    score: float
    paths: list[list[PathStepOut]]


class SeedOut(BaseModel):
    entity_id: str
    name: str
    score: float
    how: str = Field(description="exact, fulltext or vector")


class Timings(BaseModel):
    link: float
    retrieve: float
    reason: float = Field(description="router and reasoner together")
    total: float


class ModelVersions(BaseModel):
    embedder: str
    reasoner: str
    router: str | None = None
    precision: dict[str, str] = Field(default_factory=dict, description="dtype chosen per operation")


class SubgraphOut(BaseModel):
    candidate_edges: int = Field(description="facts retrieved from Neo4j: along the relations the router planned "
                                 "per hop, or the k-hop candidates")
    routed_edges: int = Field(description="facts the reasoner read: the router-guided retrieval whole, or what "
                              "the router kept of k-hop candidates (= candidate without a router)")
    candidate_entities: list[str] | None = None
    routed_entities: list[str] | None = None


class QueryOut(BaseModel):
    answers: list[AnswerOut]
    seeds: list[SeedOut]
    timings_ms: Timings
    model_versions: ModelVersions
    truncated: bool = Field(default=False, description="the candidate subgraph hit its size budget")
    subgraph: SubgraphOut | None = None
    sentence: str | None = Field(default=None, description="the top answer in words, when a verbaliser is configured")
    note: str | None = Field(default=None, description="why there is no answer, when there is none")
