"""``POST /v1/query``."""

from __future__ import annotations

from fastapi import APIRouter, Response

from factloom.platform.deps import QueryKey, ResourcesDep
from factloom.platform.query import service
from factloom.platform.query.engine import get_engine, get_verbaliser
from factloom.platform.query.schemas import QueryIn, QueryOut

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["query"])


@router.post("/query", response_model=QueryOut)
def post_query(body: QueryIn, principal: QueryKey, resources: ResourcesDep) -> Response:
    """Answer a question with ranked entities and the fact paths that support each."""
    principal.require_kb(body.kb)
    settings = resources.settings
    engine = None
    if (body.reasoner or settings.query_reasoner) != "baseline":
        engine = get_engine(settings, resources.db, resources.embedder, resources.figures)
    out = service.answer(
        store=resources.store, embedder=resources.embedder, kb=body.kb, question=body.question,
        top_k=body.top_k, max_hops=body.max_hops, as_of=body.as_of,
        hops_limit=settings.query_max_hops, max_edges=settings.query_max_edges,
        engine=engine, reasoner=body.reasoner, default_reasoner=settings.query_reasoner,
        include_subgraph=body.include_subgraph, verbaliser=get_verbaliser(settings), client_id=principal.key_id,
        inverse_template=settings.inverse_template(body.kb),
    )
    # serialised here, on the request's thread: a returned model would be validated a second time
    # and dumped on one more thread-pool hop (FastAPI does both for a plain ``def`` route)
    return Response(out.model_dump_json(by_alias=True), media_type="application/json")
