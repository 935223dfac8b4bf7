"""Monitoring: the Prometheus and Alertmanager configs and alert rules (checked and unit-tested with
Debian's promtool and amtool), the local services ``factloom up --monitoring`` starts, and the alert
webhook ``POST /v1/alerts`` end to end: a real Alertmanager posting to the test API, a real
Prometheus scraping it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client import Counter, Gauge, Histogram

from factloom import metrics as catalogue
from factloom.config import Settings
from factloom.ledger import Database
from factloom.ledger.tables import AlertEvent
from factloom.platform.admin.status import Bar, Sample, bar_chart, from_samples, quantile
from factloom.platform.admin.users import create_user
from factloom.platform.auth.service import authenticate, create_key, revoke_key
from factloom.platform.migrate import migrate_sql
from factloom.platform.monitoring import (
    ALERTMANAGER_YML,
    PROMETHEUS_YML,
    RULES_YML,
    AlertmanagerService,
    PrometheusService,
    ensure_alerts_key,
    render_alertmanager,
    render_prometheus,
    start_monitoring,
)
from factloom.platform.services import status
from tests.services import SLOT
from tests.support.api import admin_sign_in

ROOT = Path(__file__).resolve().parents[2]
RULES_TEST = ROOT / "deploy" / "prometheus" / "rules_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "factloom.json"
OPERATIONS = ROOT / "docs" / "operations.md"
PROMETHEUS_PORT, ALERTMANAGER_PORT = 19090 + 100 * SLOT, 19093 + 100 * SLOT
ALERTS = ("FactloomModelRolledBack", "FactloomLearnUpdatesFailing", "FactloomQueueBacklog", "FactloomHighErrorRate",
          "FactloomQueryLatencySLO", "FactloomTargetDown", "FactloomCertifiedBoundAboveTarget")

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool missing: scripts/setup.sh installs Debian's prometheus package")
needs_amtool = pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool missing: scripts/setup.sh installs "
                                  "Debian's prometheus-alertmanager package")
needs_both = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("prometheus-alertmanager") is None,
    reason="prometheus or prometheus-alertmanager missing: scripts/setup.sh installs Debian's packages")


def tool(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES_YML.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def local(tmp_path: Path, **changes: Any) -> Settings:
    values = {"api_port": 18123, "prometheus_port": 19990, "alertmanager_port": 19993, **changes}
    return Settings(_env_file=None, home=tmp_path, **values)  # type: ignore[call-arg]


# ---------------------------------------------------------------- the files, checked by the real tools


@needs_promtool
def test_promtool_checks_the_config_and_the_rules() -> None:
    out = tool("promtool", "check", "config", str(PROMETHEUS_YML))
    assert "1 rule files found" in out
    out = tool("promtool", "check", "rules", str(RULES_YML))
    assert f"SUCCESS: {len(ALERTS)} rules found" in out


@needs_promtool
def test_promtool_unit_tests_pass_and_cover_every_alert_firing_and_not() -> None:
    assert "SUCCESS" in tool("promtool", "test", "rules", str(RULES_TEST))
    assert set(rules()) == set(ALERTS)
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    assert firing == set(ALERTS) and quiet == set(ALERTS)


@needs_promtool
def test_the_unit_tests_can_fail(tmp_path: Path) -> None:
    """A rule with a threshold moved no longer passes its tests: they pin the rules down."""
    (tmp_path / "rules.yml").write_text(RULES_YML.read_text().replace("factloom_queue_depth) > 500",
                                                                      "factloom_queue_depth) > 5000"))
    shutil.copy(RULES_TEST, tmp_path / "rules_test.yml")
    proc = subprocess.run(["promtool", "test", "rules", str(tmp_path / "rules_test.yml")], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode != 0 and "FactloomQueueBacklog" in proc.stdout + proc.stderr


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section() -> None:
    headings = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), flags=re.M)}
    for name, rule in rules().items():
        assert rule["labels"]["severity"] in ("page", "warning"), name
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], name
        page, _, anchor = notes["runbook"].partition("#")
        assert page == "docs/operations.md" and anchor == name.lower() and anchor in headings, name


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, Grafana's variables put in as Grafana would."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"].replace("$__rate_interval", "1m").replace("$kb", ".*"))
            for p in panels if p["type"] != "row" for t in p["targets"]]


@needs_promtool
def test_the_dashboards_queries_are_valid_promql_over_the_whole_catalogue(tmp_path: Path) -> None:
    queries = dashboard_queries()
    recording = [{"record": f"dashboard:q{i}", "expr": expr} for i, (_, expr) in enumerate(queries)]
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recording}]}))
    assert f"SUCCESS: {len(queries)} rules found" in tool("promtool", "check", "rules", str(tmp_path / "dashboard.yml"))
    text = " ".join(expr for _, expr in queries)
    for metric in (m for m in vars(catalogue).values() if isinstance(m, Counter | Gauge | Histogram)):
        assert metric._name in text, f"no panel reads {metric._name}"
    assert "factloom_queue_depth" in text and "factloom_submissions" in text


@needs_amtool
def test_amtool_checks_the_alertmanager_config() -> None:
    out = tool("amtool", "check-config", str(ALERTMANAGER_YML))
    assert "1 receivers" in out
    hook = yaml.safe_load(ALERTMANAGER_YML.read_text())["receivers"][0]["webhook_configs"][0]
    assert hook["url"].endswith("/v1/alerts") and hook["send_resolved"] is True
    assert hook["http_config"]["authorization"] == {"type": "Bearer",
                                                    "credentials_file": "/etc/alertmanager/secrets/api-key"}


@needs_promtool
@needs_amtool
def test_local_configs_render_with_local_addresses_and_pass_the_tools(tmp_path: Path) -> None:
    settings = local(tmp_path, monitoring_scrape_s=1.5, alertmanager_group_wait_s=2, api_host="0.0.0.0")
    prometheus = render_prometheus(settings)
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in prometheus["scrape_configs"]}
    assert jobs == {"factloom-api": ["127.0.0.1:18123"], "alertmanager": ["127.0.0.1:19993"],
                    "prometheus": ["127.0.0.1:19990"]}  # no worker port set: their counts reach the API's
    assert prometheus["global"]["scrape_interval"] == "1500ms" and prometheus["rule_files"] == [str(RULES_YML)]
    assert prometheus["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:19993"]
    workers = render_prometheus(local(tmp_path, worker_metrics_port=19100))
    assert {"job_name": "factloom-workers", "metrics_path": "/metrics",
            "static_configs": [{"targets": ["127.0.0.1:19100"]}]} in workers["scrape_configs"]
    key = tmp_path / "key"
    alertmanager = render_alertmanager(settings, key, group_interval_s=1)
    hook = alertmanager["receivers"][0]["webhook_configs"][0]
    assert hook["url"] == "http://127.0.0.1:18123/v1/alerts"
    assert hook["http_config"]["authorization"]["credentials_file"] == str(key)
    assert alertmanager["route"]["group_wait"] == "2000ms" and alertmanager["route"]["group_interval"] == "1000ms"
    (tmp_path / "p.yml").write_text(yaml.safe_dump(prometheus))
    (tmp_path / "a.yml").write_text(yaml.safe_dump(alertmanager))
    tool("promtool", "check", "config", str(tmp_path / "p.yml"))
    tool("amtool", "check-config", str(tmp_path / "a.yml"))


def test_alertmanagers_key_is_private_scoped_to_alerts_and_made_again_once_revoked(tmp_path: Path) -> None:
    settings = local(tmp_path)
    migrate_sql(settings.sql_url)
    db = Database(settings.sql_url)
    try:
        path = ensure_alerts_key(settings)
        assert path.stat().st_mode & 0o777 == 0o600
        first = path.read_text()
        principal = authenticate(db=db, token=first)
        assert principal.scopes == {"alerts"} and principal.name == "alertmanager"
        assert ensure_alerts_key(settings).read_text() == first  # kept while it works
        revoke_key(db=db, key_id=principal.key_id, actor="test")
        again = ensure_alerts_key(settings).read_text()
        assert again != first and authenticate(db=db, token=again).scopes == {"alerts"}
        assert path.stat().st_mode & 0o777 == 0o600
    finally:
        db.dispose()


# ---------------------------------------------------------------- the webhook's guard (live API)


def webhook_body(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {"version": "4", "groupKey": "{}:{alertname=\"x\"}", "truncatedAlerts": 0, "status": status,
            "receiver": "factloom-api", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts)}


def one_alert(name: str, fingerprint: str, **changes: Any) -> dict[str, Any]:
    return {"status": "firing", "labels": {"alertname": name, "severity": "warning", "kb": "monitoring"},
            "annotations": {"summary": f"{name} summary"}, "startsAt": "2026-01-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus:9090/graph",
            "fingerprint": fingerprint, **changes}


def stored(db: Database, name: str) -> list[AlertEvent]:
    with db.session() as session:
        return list(session.query(AlertEvent).filter(AlertEvent.alertname == name))


@pytest.mark.integration
def test_the_webhook_wants_an_alerts_key_and_a_valid_body(
    client_with: Callable[[str], httpx.Client], anonymous: httpx.Client, db: Database
) -> None:
    name = f"Guard{uuid.uuid4().hex[:8]}"
    good = webhook_body(one_alert(name, "aaaa000011112222"))
    nobody = anonymous.post("/v1/alerts", json=good)
    assert nobody.status_code == 401 and nobody.headers["content-type"] == "application/problem+json"
    bad_key = anonymous.post("/v1/alerts", json=good, headers={"Authorization": "Bearer fl_nothing_here"})
    assert bad_key.status_code == 401
    for scopes in ("query", "ingest,review"):
        refused = client_with(scopes).post("/v1/alerts", json=good)
        assert refused.status_code == 403 and "'alerts' scope" in refused.json()["detail"], scopes
    alerts = client_with("alerts")
    junk: list[Any] = [
        {}, [], "firing", {"version": "3", "status": "firing", "alerts": []},
        {**good, "alerts": "everything"}, {**good, "status": "burning"},
        webhook_body(one_alert(name, "not-hex!")),
        webhook_body({k: v for k, v in one_alert(name, "aaaa000011113333").items() if k != "fingerprint"}),
        webhook_body(one_alert(name, "aaaa000011114444", startsAt="yesterday")),
        webhook_body(one_alert(name, "aaaa000011115555", labels={"severity": "page"})),  # no alertname
        webhook_body(one_alert(name, "aaaa000011116666", labels={"alertname": name, "kb": "nul\x00here"})),
        webhook_body(*[one_alert(name, f"{i:016x}") for i in range(1001)]),
    ]
    for body in junk:
        answer = alerts.post("/v1/alerts", json=body)
        assert answer.status_code == 422, (body if len(str(body)) < 300 else "1001 alerts", answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
    assert stored(db, name) == []
    done = alerts.post("/v1/alerts", json=good)
    assert done.status_code == 200 and done.json() == {"received": 1, "firing": 1, "resolved": 0}
    assert [(r.fingerprint, r.status, r.kb, r.severity, r.ends_at) for r in stored(db, name)] == [
        ("aaaa000011112222", "firing", "monitoring", "warning", None)]
    # the alerts key may post and nothing else: not read alerts back, not query
    assert alerts.get("/v1/alerts").status_code == 403
    assert alerts.post("/v1/query", json={"question": "who directed [Alien]"}).status_code == 403


@pytest.mark.integration
def test_a_firing_is_one_row_updated_until_it_resolves(
    client_with: Callable[[str], httpx.Client], api: httpx.Client
) -> None:
    name = f"Upsert{uuid.uuid4().hex[:8]}"
    alerts = client_with("alerts")
    firing = one_alert(name, "bbbb000011112222")
    assert alerts.post("/v1/alerts", json=webhook_body(firing)).status_code == 200
    assert alerts.post("/v1/alerts", json=webhook_body(firing)).status_code == 200  # repeated notice
    resolved = {**firing, "status": "resolved", "endsAt": "2026-01-01T00:10:00+02:00"}
    assert alerts.post("/v1/alerts", json=webhook_body(resolved, status="resolved")).status_code == 200
    late = alerts.post("/v1/alerts", json=webhook_body(firing))  # a retried delivery, overtaken
    assert late.status_code == 200
    again = one_alert(name, "bbbb000011112222", startsAt="2026-01-02T00:00:00Z")  # the same alert, firing anew
    assert alerts.post("/v1/alerts", json=webhook_body(again)).status_code == 200
    items = api.get("/v1/alerts", params={"alertname": name}).json()["items"]
    assert [(i["status"], i["starts_at"], i["ends_at"]) for i in items] == [
        ("firing", "2026-01-02T00:00:00Z", None),
        ("resolved", "2026-01-01T00:00:00Z", "2025-12-31T22:10:00Z"),
    ]
    assert items[1]["summary"] == f"{name} summary" and items[1]["labels"]["kb"] == "monitoring"
    only = api.get("/v1/alerts", params={"alertname": name, "status": "resolved"}).json()["items"]
    assert [i["id"] for i in only] == [items[1]["id"]]
    page = api.get("/v1/alerts", params={"alertname": name, "limit": 1}).json()
    assert page["next_before"] == items[0]["id"]
    older = api.get("/v1/alerts", params={"alertname": name, "before": page["next_before"]}).json()["items"]
    assert [i["id"] for i in older] == [items[1]["id"]]


# ---------------------------------------------------------------- the real Prometheus and Alertmanager


@pytest.fixture(scope="module")
def monitored(live: object, settings: Settings) -> Iterator[Settings]:
    """Prometheus scraping the test API every second and Alertmanager posting to it, on this slot's
    ports; Alertmanager's group wait and interval are 1 s so its notices come at once."""
    if shutil.which("prometheus") is None or shutil.which("prometheus-alertmanager") is None:
        pytest.skip("prometheus or prometheus-alertmanager missing: scripts/setup.sh installs Debian's packages")
    changed = settings.model_copy(update={"prometheus_port": PROMETHEUS_PORT, "alertmanager_port": ALERTMANAGER_PORT,
                                          "monitoring_scrape_s": 1.0, "alertmanager_group_wait_s": 1.0})
    quick = AlertmanagerService(changed, group_interval_s=1.0)
    try:
        quick.start()
        started = start_monitoring(changed)  # what `factloom up --monitoring` runs: Alertmanager is up already
        assert list(started) == ["alertmanager", "prometheus"]
        yield changed
    finally:
        PrometheusService(changed).stop()
        quick.stop()


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def promql(url: str, query: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]  # type: ignore[no-any-return]


@pytest.mark.integration
@needs_both
def test_prometheus_scrapes_the_api_and_holds_the_rules(monitored: Settings) -> None:
    url = f"http://127.0.0.1:{monitored.prometheus_port}"
    api = f"127.0.0.1:{monitored.api_port}"
    up = wait_for("up == 1 for the API", lambda: promql(url, 'up{job="factloom-api"} == 1'))
    assert [r["metric"]["instance"] for r in up] == [api]
    seen = wait_for("a request metric scraped", lambda: promql(url, "factloom_http_request_seconds_count"))
    assert all(r["metric"]["instance"] == api for r in seen)
    groups = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    assert {r["name"] for g in groups for r in g["rules"]} == set(ALERTS)
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups
    managers = wait_for("Alertmanager discovered", lambda: httpx.get(
        f"{url}/api/v1/alertmanagers", timeout=10).json()["data"]["activeAlertmanagers"])
    assert managers == [{"url": f"http://127.0.0.1:{monitored.alertmanager_port}/api/v2/alerts"}]
    assert {"prometheus", "alertmanager"} <= {n for n, on in status(monitored).items() if on}
    for title, expr in dashboard_queries():  # every panel's query runs on a real Prometheus
        answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert answer["status"] == "success", (title, expr, answer)


@pytest.mark.integration
@needs_both
def test_alertmanager_posts_an_alert_to_the_api_firing_then_resolved(monitored: Settings, api: httpx.Client) -> None:
    key = ensure_alerts_key(monitored)
    assert key.stat().st_mode & 0o777 == 0o600
    name, run = "FactloomMonitoringTest", uuid.uuid4().hex
    start = datetime.now(UTC).replace(microsecond=0)
    alert = {"labels": {"alertname": name, "severity": "warning", "kb": "monitoring", "run": run},
             "annotations": {"summary": "posted by tests/platform/test_monitoring.py",
                             "runbook": "docs/operations.md#monitoring"},
             "startsAt": start.isoformat().replace("+00:00", "Z")}
    manager = f"http://127.0.0.1:{monitored.alertmanager_port}/api/v2/alerts"
    assert httpx.post(manager, json=[alert], timeout=10).status_code == 200

    def ours(state: str) -> list[dict[str, Any]]:
        items = api.get("/v1/alerts", params={"alertname": name, "limit": 500}).json()["items"]
        return [i for i in items if i["labels"].get("run") == run and i["status"] == state]

    [firing] = wait_for("the firing alert in GET /v1/alerts", lambda: ours("firing"))
    assert firing["starts_at"] == alert["startsAt"] and firing["kb"] == "monitoring"
    assert firing["severity"] == "warning" and firing["runbook"] == "docs/operations.md#monitoring"
    assert re.fullmatch(r"[0-9a-f]{16}", firing["fingerprint"])

    end = datetime.now(UTC) - timedelta(seconds=1)
    resolved_alert = {**alert, "endsAt": end.isoformat().replace("+00:00", "Z")}
    assert httpx.post(manager, json=[resolved_alert], timeout=10).status_code == 200
    [resolved] = wait_for("the resolved alert in GET /v1/alerts", lambda: ours("resolved"))
    assert resolved["id"] == firing["id"] and resolved["ends_at"] is not None  # the same row, updated
    assert ours("firing") == []
    metrics = httpx.get(f"{monitored.base_url}/metrics", timeout=10).text
    counted = re.search(rf'factloom_alerts_received_total{{alertname="{name}",status="resolved"}} (\S+)', metrics)
    assert counted and float(counted.group(1)) >= 1


# ---------------------------------------------------------------- the admin Status page


def test_quantile_reads_buckets_as_histogram_quantile_does() -> None:
    # the buckets of the latency rule's unit test, where promtool's histogram_quantile gives 2.125
    assert quantile(0.95, [(0.5, 300), (1, 480), (2.5, 600), (float("inf"), 600)]) == pytest.approx(2.125)
    assert quantile(0.5, [(0.1, 10), (float("inf"), 10)]) == pytest.approx(0.05)
    assert quantile(0.95, [(0.1, 1), (1, 2), (float("inf"), 100)]) == 1  # past the last bound: that bound
    assert quantile(0.95, [(0.1, 0), (float("inf"), 0)]) is None and quantile(0.95, []) is None


def test_readings_sum_processes_and_leave_probes_out() -> None:
    def h(route: str, status: str, bounds: dict[str, float]) -> list[Sample]:
        labels = {"method": "POST", "route": route, "status": status}
        return ([Sample("factloom_http_request_seconds_bucket", {**labels, "le": le}, n) for le, n in bounds.items()]
                + [Sample("factloom_http_request_seconds_count", labels, bounds["+Inf"])])

    found = [
        *h("/v1/query", "200", {"0.5": 300, "1": 480, "2.5": 600, "+Inf": 600}),
        *h("/v1/query", "503", {"0.5": 60, "1": 60, "2.5": 60, "+Inf": 60}),
        *h("/metrics", "200", {"0.5": 9000, "1": 9000, "2.5": 9000, "+Inf": 9000}),
        Sample("factloom_queue_depth", {"queue": "check"}, 700), Sample("factloom_queue_depth", {"queue": "learn"}, 0),
        Sample("factloom_check_verdicts_total", {"kb": "a", "verdict": "accepted"}, 5),
        Sample("factloom_check_verdicts_total", {"kb": "b", "verdict": "accepted"}, 2),
        Sample("factloom_verifier_checks_total", {"verifier": "image"}, 10),
        Sample("factloom_verifier_abstentions_total", {"verifier": "image"}, 9),
        Sample("factloom_shadow_agreement_total", {"kb": "a", "version": "v2", "agree": "true"}, 3),
        Sample("factloom_shadow_agreement_total", {"kb": "a", "version": "v2", "agree": "false"}, 1),
        Sample("factloom_model_failing_periods", {"kb": "a", "kind": "scorer"}, 2),
        Sample("factloom_router_attention_entropy_sum", {"hop": "1"}, 3.0),
        Sample("factloom_router_attention_entropy_count", {"hop": "1"}, 4),
    ]
    got = from_samples(found)
    assert [(b.label, b.value) for b in got.requests] == [("/v1/query", 660)]  # /metrics is no request
    # summed over statuses: rank 0.95 * 660 = 627 lies in (1, 2.5], 87 of its 120: 1 + 1.5 * 87 / 120 s
    assert [b.text for b in got.latency] == ["2088 ms"] and got.latency[0].tone == "bad"
    assert got.errors[0].text == "9.1 %" and got.errors[0].tone == "bad"
    assert [(b.label, b.tone) for b in got.queues] == [("check", "bad"), ("learn", "plain")]
    assert got.verdicts == {"accepted": 7}
    assert got.abstention[0].text == "90.0 % of 10" and got.agreement[0].text == "75.0 % of 4"
    assert got.failing[0].tone == "bad" and got.entropy[0].text == "0.75 nats"
    assert got.learn == [] and got.rollbacks == []


def test_bar_chart_escapes_names() -> None:
    svg = str(bar_chart([Bar("<script>x</script>", 1, "1 <b>")], label="l<"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "1 &lt;b&gt;" in svg
    assert "Nothing counted yet" in str(bar_chart([], label="empty"))


@pytest.fixture(scope="module")
def admin_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    """The app in-process on a ledger of its own (no Neo4j, no Redis): an admin and a reviewer, and an
    alerts key."""
    from factloom.platform.app import create_app

    home: Path = tmp_path_factory.mktemp("status-home")
    settings = Settings(_env_file=None, home=home, admin_secret="test-secret-" + "x" * 20,  # type: ignore[call-arg]
                        neo4j_uri="bolt://127.0.0.1:9", redis_url="redis://127.0.0.1:9/0", query_warm_up=False)
    migrate_sql(settings.sql_url)
    db = Database(settings.sql_url)
    create_user(db=db, name="ada", role="admin", password="admin-pass-1")
    create_user(db=db, name="rita", role="reviewer", password="reviewer-pass")
    token, _ = create_key(db=db, name="alertmanager", scopes=["alerts"])
    db.dispose()
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        yield client, token


def test_the_status_page_lists_firing_alerts_first_and_draws_the_charts(admin_client: tuple[TestClient, str]) -> None:
    client, token = admin_client
    key = {"Authorization": f"Bearer {token}"}
    old = one_alert("FactloomQueueBacklog", "cccc000011112222", labels={"alertname": "FactloomQueueBacklog",
                                                                          "severity": "warning", "queue": "check"})
    resolved = {**old, "status": "resolved", "endsAt": "2026-01-01T00:20:00Z"}
    assert client.post("/v1/alerts", json=webhook_body(old), headers=key).status_code == 200
    assert client.post("/v1/alerts", json=webhook_body(resolved, status="resolved"), headers=key).status_code == 200
    rolled = one_alert("FactloomModelRolledBack", "dddd000011112222", annotations={
        "summary": "kb films: the <scorer> was rolled back", "runbook": "docs/operations.md#factloommodelrolledback"})
    assert client.post("/v1/alerts", json=webhook_body(rolled), headers=key).status_code == 200

    admin_sign_in(client, "rita", "reviewer-pass")
    refused = client.get("/admin/status")
    assert refused.status_code == 403 and "Status</a>" not in refused.text
    admin_sign_in(client, "ada", "admin-pass-1")
    page = client.get("/admin/status")
    assert page.status_code == 200 and 'href="/admin/status" class="active"' in page.text
    assert re.search(r'id="firing-count">1<', page.text)
    table = page.text[page.text.index('id="alerts"'):page.text.index("</table>")]
    assert table.index("FactloomModelRolledBack") < table.index("FactloomQueueBacklog")  # firing first
    assert table.count('class="alert-firing"') == 1 and table.count('class="alert-resolved"') == 1
    assert "the &lt;scorer&gt; was rolled back" in table and "docs/operations.md#factloommodelrolledback" in table
    # the page's own requests were counted (the chart shows the busiest routes of this process, which
    # in a full test run are other tests' routes too)
    from factloom.platform.metrics import REQUEST_SECONDS

    chart = page.text.split('aria-label="requests per route"')[1].split("</svg>")[0]
    assert chart.count("<rect") >= 2
    counted = {s.labels["route"] for m in REQUEST_SECONDS.collect() for s in m.samples if s.name.endswith("_count")}
    assert "/v1/alerts" in counted and "/admin/status" in counted
    assert page.text.count("<svg") >= 3



@needs_both
def test_up_monitoring_starts_both_status_lists_them_and_down_stops_them(tmp_path: Path) -> None:
    """What ``factloom up --monitoring``, ``status`` and ``down`` run, on a home of its own (no API:
    Prometheus's scrape of it fails, which changes nothing here)."""
    from factloom.platform.cli import build_parser
    from factloom.platform.services import stop_all

    assert build_parser().parse_args(["up", "--monitoring"]).monitoring is True
    settings = local(tmp_path, prometheus_port=PROMETHEUS_PORT + 10, alertmanager_port=ALERTMANAGER_PORT + 10)
    migrate_sql(settings.sql_url)
    assert "prometheus" not in status(settings)  # neither running nor asked for
    assert status(settings.model_copy(update={"monitoring": True}))["prometheus"] is False
    try:
        started = start_monitoring(settings)
        states = status(settings)
        assert states["prometheus"] and states["alertmanager"] and not states["api"]
        assert (tmp_path / "monitoring" / "prometheus.yml").exists()
        assert (tmp_path / "monitoring" / "alertmanager-key").stat().st_mode & 0o777 == 0o600
        stop_all(settings)
        running = {name: (s.pid(), s.log_tail(5)) for name, s in started.items() if s.pid() is not None}
        assert not running, f"still running after stop_all: {running}"
        assert "prometheus" not in status(settings) and "alertmanager" not in status(settings)
    finally:
        for service in (PrometheusService(settings), AlertmanagerService(settings)):
            service.stop()
