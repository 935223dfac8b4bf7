"""Celery: the app, its tasks (``check``, ``ingest`` queues) and the beat schedule."""

from __future__ import annotations

from factloom.workers.app import app

__all__ = ["app"]
