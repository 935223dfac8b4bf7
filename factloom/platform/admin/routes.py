"""Every admin route, as one router the app includes: ``app.include_router(router)``."""

from __future__ import annotations

from fastapi import APIRouter

from factloom.platform.admin import (
    routes_auth,
    routes_certification,
    routes_graph,
    routes_ops,
    routes_review,
    routes_status,
)

__all__ = ["router"]

router = APIRouter()
for _module in (routes_auth, routes_review, routes_graph, routes_ops, routes_status, routes_certification):
    router.include_router(_module.router)
