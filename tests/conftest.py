"""Shared fixtures. Tests use the real thing: services are started by the run, on test ports.

The test configuration is exported as ``FACTLOOM_*`` when this file is imported, before test
modules are, so any ``get_settings()`` call sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database
from factloom.platform.auth.service import create_key
from factloom.platform.migrate import migrate
from factloom.platform.process import Service
from factloom.platform.services import Neo4jService, PostgresService, RedisService, services
from tests.services import (
    PORTS,
    apply_env,
    claim_home,
    default_home,
    make_settings,
    release_home,
    running,
)

SETTINGS = make_settings(default_home())
apply_env(SETTINGS)


# --- service fixtures ---

@pytest.fixture(scope="session")
def settings() -> Iterator[Settings]:
    """The test Settings; taking it claims the test home (lock, leftovers stopped, state wiped)."""
    lock = claim_home(SETTINGS)
    try:
        yield SETTINGS
    finally:
        release_home(SETTINGS, lock)  # stops anything the session left running


@pytest.fixture(scope="session")
def neo4j_service(settings: Settings) -> Iterator[Neo4jService]:
    with running(Neo4jService(settings)) as service:  # fetches the jars first when absent
        yield service


@pytest.fixture(scope="session")
def redis_service(settings: Settings) -> Iterator[RedisService]:
    with running(RedisService(settings)) as service:
        yield service


@pytest.fixture(scope="session")
def postgres_url(settings: Settings) -> Iterator[str]:
    """A running PostgreSQL with an empty ``factloom`` database; its SQLAlchemy URL."""
    service = PostgresService(settings, port=PORTS["postgres"])
    with running(service):
        yield service.url


# --- platform fixtures: the API, a Celery worker and beat as real processes ---

@pytest.fixture(scope="session")
def live(settings: Settings, neo4j_service: Neo4jService, redis_service: RedisService) -> Iterator[dict[str, Service]]:
    migrate(settings)
    found = services(settings)
    processes = {name: found[name] for name in ("worker", "learner", "beat", "api")}
    try:
        for service in processes.values():
            service.start()
        yield processes
    finally:
        for service in reversed(list(processes.values())):
            service.stop()


@pytest.fixture(scope="session")
def worker(live: dict[str, Service]) -> Service:
    return live["worker"]


@pytest.fixture(scope="session")
def worker_with(live: dict[str, Service], settings: Settings) -> Callable[..., AbstractContextManager[Service]]:
    """``with worker_with(image_model_path=...):`` runs the session's Celery worker with those Settings
    changed (passed to it as ``FACTLOOM_*``) for the block; the session's own worker is back after it."""

    @contextmanager
    def swap(**changes: Any) -> Iterator[Service]:
        live["worker"].stop()
        changed = services(settings.model_copy(update=changes))["worker"]
        try:
            changed.start()
            yield changed
        finally:
            changed.stop()
            live["worker"].start()

    return swap


@pytest.fixture(scope="session")
def db(live: dict[str, Service], settings: Settings) -> Iterator[Database]:
    database = Database(settings.sql_url)
    yield database
    database.dispose()


@pytest.fixture(scope="session")
def store(neo4j_service: Neo4jService, settings: Settings) -> Iterator[Neo4jStore]:
    graph = Neo4jStore(settings.neo4j_uri, settings.neo4j_auth())
    yield graph
    graph.close()


@pytest.fixture(scope="session")
def client_with(live: dict[str, Service], db: Database, settings: Settings) -> Iterator[Callable[[str], httpx.Client]]:
    """A factory of HTTP clients holding a new key with the given comma-separated scopes."""
    clients: list[httpx.Client] = []

    def make(scopes: str) -> httpx.Client:
        token, _ = create_key(db=db, name=f"test-{scopes}", scopes=scopes.split(","))
        client = httpx.Client(base_url=settings.base_url, timeout=60, headers={"Authorization": f"Bearer {token}"})
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture(scope="session")
def api(client_with: Callable[[str], httpx.Client]) -> httpx.Client:
    return client_with("admin")


@pytest.fixture(scope="session")
def anonymous(live: dict[str, Service], settings: Settings) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=settings.base_url, timeout=60) as client:
        yield client


# --- model fixtures ---

@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised CLIP checkpoint on disk (character-level tokens, 32-pixel images)."""
    from transformers import (
        CLIPConfig,
        CLIPImageProcessor,
        CLIPModel,
        CLIPProcessor,
        CLIPTextConfig,
        CLIPTokenizerFast,
        CLIPVisionConfig,
    )

    path = tmp_path_factory.mktemp("tiny-clip")
    # a character-level vocabulary: every caption gets its own token ids (with no merges, each
    # character is a token, and "x</w>" ends a word), so captions differ and the scores with them
    chars = "abcdefghijklmnopqrstuvwxyz0123456789'.,-_"
    tokens = ["<|startoftext|>", "<|endoftext|>", *chars, *(f"{c}</w>" for c in chars)]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = CLIPTokenizerFast(vocab=vocab, merges=[])
    text = CLIPTextConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, max_position_embeddings=77, projection_dim=8,
                          bos_token_id=0, eos_token_id=1, pad_token_id=1)
    vision = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                              image_size=32, patch_size=16, projection_dim=8)
    model = CLIPModel(CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=8))
    model.save_pretrained(path)
    CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                     crop_size={"height": 32, "width": 32}),
                  tokenizer=tok).save_pretrained(path)
    return path
