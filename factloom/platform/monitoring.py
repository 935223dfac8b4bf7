"""Prometheus and Alertmanager beside the local platform: ``factloom up --monitoring`` (or
``FACTLOOM_MONITORING=true``).

Both are Debian's packages (``scripts/setup.sh`` installs them), run as two more local services with
their data under ``home/monitoring``. Their configuration is rendered from the files docker-compose
uses, ``deploy/prometheus/prometheus.yml`` and ``deploy/alertmanager/alertmanager.yml``: the same jobs,
rules, routes and receiver, with the local addresses put in (the API's port, Alertmanager's, the
worker metrics port where one is set) and Alertmanager's API key read from a file of its own. That
key has the ``alerts`` scope only: it may post to ``POST /v1/alerts`` and nothing else. It is made
once, kept in ``home/monitoring/alertmanager-key`` (mode 0600), and made again when the ledger no
longer knows it.

Alertmanager's cluster listener (9094 by default, on every address) is turned off: a local
Alertmanager has no peers, and two platforms on one machine (a developer's and the tests') would
fight over that port.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from factloom.config import Settings
from factloom.platform.process import Service, ServiceError, http_ok

__all__ = [
    "DEPLOY", "PROMETHEUS_YML", "RULES_YML", "ALERTMANAGER_YML", "PrometheusService", "AlertmanagerService",
    "monitoring_services", "start_monitoring", "alerts_key_file", "ensure_alerts_key", "render_prometheus",
    "render_alertmanager", "api_address",
]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
RULES_YML = DEPLOY / "prometheus" / "rules.yml"
ALERTMANAGER_YML = DEPLOY / "alertmanager" / "alertmanager.yml"
KEY_NAME = "alertmanager"


def _duration(seconds: float) -> str:
    """A Prometheus duration: whole milliseconds (``1.5s`` is not one; ``1500ms`` is)."""
    return f"{max(1, round(seconds * 1000))}ms"


def monitoring_dir(settings: Settings) -> Path:
    return settings.home / "monitoring"


def api_address(settings: Settings) -> str:
    """``host:port`` where a local Prometheus and Alertmanager reach the API."""
    wildcard = settings.api_host in ("0.0.0.0", "::")  # noqa: S104 - recognising a wildcard, not binding one
    return f"{'127.0.0.1' if wildcard else settings.api_host}:{settings.api_port}"


# --- configuration --------------------------------------------------------------------------------

def render_prometheus(settings: Settings) -> dict[str, Any]:
    """``deploy/prometheus/prometheus.yml`` with the local platform's addresses and scrape interval."""
    config: dict[str, Any] = yaml.safe_load(PROMETHEUS_YML.read_text())
    interval = _duration(settings.monitoring_scrape_s)
    config["global"].update(scrape_interval=interval, evaluation_interval=interval,
                            scrape_timeout=_duration(min(settings.monitoring_scrape_s, 10.0)))
    config["rule_files"] = [str(RULES_YML)]
    config["alerting"]["alertmanagers"] = [
        {"static_configs": [{"targets": [f"127.0.0.1:{settings.alertmanager_port}"]}]}]
    targets = {
        "factloom-api": [api_address(settings)],
        # locally the workers' counts reach the API's /metrics; a port of their own only where set
        "factloom-workers": [f"127.0.0.1:{settings.worker_metrics_port}"] if settings.worker_metrics_port else [],
        "alertmanager": [f"127.0.0.1:{settings.alertmanager_port}"],
        "prometheus": [f"127.0.0.1:{settings.prometheus_port}"],
    }
    jobs = []
    for job in config["scrape_configs"]:
        found = targets.get(job["job_name"])
        if found is None:
            raise ServiceError(f"{PROMETHEUS_YML} has a job {job['job_name']!r} that monitoring.py cannot place")
        if found:
            jobs.append({**job, "static_configs": [{"targets": found}]})
    config["scrape_configs"] = jobs
    return config


def render_alertmanager(settings: Settings, key_file: Path, *, group_interval_s: float | None = None) -> dict[str, Any]:
    """``deploy/alertmanager/alertmanager.yml`` posting to the local API with the key in ``key_file``."""
    config: dict[str, Any] = yaml.safe_load(ALERTMANAGER_YML.read_text())
    config["route"]["group_wait"] = _duration(settings.alertmanager_group_wait_s)
    if group_interval_s is not None:
        config["route"]["group_interval"] = _duration(group_interval_s)
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"http://{api_address(settings)}/v1/alerts"
            hook["http_config"]["authorization"]["credentials_file"] = str(key_file)
    return config


def alerts_key_file(settings: Settings) -> Path:
    return monitoring_dir(settings) / "alertmanager-key"


def ensure_alerts_key(settings: Settings) -> Path:
    """The file holding Alertmanager's ``alerts``-scoped key (mode 0600), made when absent or unknown
    to the ledger (a wiped home, a restored backup); needs a migrated ledger."""
    from factloom.ledger import Database
    from factloom.platform.auth.service import authenticate, create_key
    from factloom.platform.errors import Unauthorized

    path = alerts_key_file(settings)
    db = Database(settings.sql_url)
    try:
        if path.exists():
            try:
                if authenticate(db=db, token=path.read_text().strip()).has("alerts"):
                    return path
            except Unauthorized:
                pass
        token, _ = create_key(db=db, name=KEY_NAME, scopes=["alerts"])
    finally:
        db.dispose()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)  # never readable by others, not even for a moment
    path.write_text(token)
    return path


# --- services -------------------------------------------------------------------------------------

def _exe(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise ServiceError(f"{names[0]} is not installed; run scripts/setup.sh (Debian package {names[0]})")


class PrometheusService(Service):
    """Prometheus on loopback, scraping the local API; its TSDB in ``home/monitoring/prometheus``."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("prometheus", settings, match="prometheus --config.file")
        self.config_file = monitoring_dir(settings) / "prometheus.yml"
        self.data_dir = monitoring_dir(settings) / "prometheus"
        self.url = f"http://127.0.0.1:{settings.prometheus_port}"

    def prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(yaml.safe_dump(render_prometheus(self.settings), sort_keys=False))

    def command(self) -> list[str]:
        return [_exe("prometheus"), f"--config.file={self.config_file}", f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address=127.0.0.1:{self.settings.prometheus_port}",
                f"--web.external-url={self.url}"]

    def probe(self) -> bool:
        return http_ok(f"{self.url}/-/ready")


class AlertmanagerService(Service):
    """Alertmanager on loopback posting to ``POST /v1/alerts``; its state in ``home/monitoring/alertmanager``.

    ``group_interval_s`` overrides the route's group interval (the tests wait for a resolved notice)."""

    def __init__(self, settings: Settings, *, group_interval_s: float | None = None) -> None:
        super().__init__("alertmanager", settings, match="alertmanager --config.file")
        self.config_file = monitoring_dir(settings) / "alertmanager.yml"
        self.data_dir = monitoring_dir(settings) / "alertmanager"
        self.url = f"http://127.0.0.1:{settings.alertmanager_port}"
        self.group_interval_s = group_interval_s

    def prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = render_alertmanager(self.settings, ensure_alerts_key(self.settings),
                                     group_interval_s=self.group_interval_s)
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))

    def command(self) -> list[str]:
        return [_exe("prometheus-alertmanager", "alertmanager"), f"--config.file={self.config_file}",
                f"--storage.path={self.data_dir}", f"--web.listen-address=127.0.0.1:{self.settings.alertmanager_port}",
                f"--web.external-url={self.url}", "--cluster.listen-address="]

    def probe(self) -> bool:
        return http_ok(f"{self.url}/-/ready")


def monitoring_services(settings: Settings) -> dict[str, PrometheusService | AlertmanagerService]:
    """Alertmanager, then Prometheus (which sends it alerts), in start order."""
    return {"alertmanager": AlertmanagerService(settings), "prometheus": PrometheusService(settings)}


def start_monitoring(settings: Settings) -> dict[str, PrometheusService | AlertmanagerService]:
    """Start both (a running one is left alone); the ledger must be migrated (Alertmanager's key)."""
    found = monitoring_services(settings)
    for service in found.values():
        service.start()
    return found
