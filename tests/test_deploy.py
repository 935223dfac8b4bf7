"""deploy/k8s: the Kubernetes manifests validate, agree with each other and with the code, and the
driver's routing scheme (``neo4j://``) works against the test Neo4j.

Core kinds are validated offline against the Kubernetes 1.30 schemas of ``kubernetes-validate``
(strict: an unknown field is an error); KEDA's ScaledObject and the Prometheus operator's monitors,
which those schemas lack, against the small schemas below, written from the fields their docs list.
``kubectl kustomize`` builds the same objects where kubectl is installed.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from factloom.config import Settings

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30"
# Helm values, not Kubernetes objects: checked on their own below
HELM_VALUES = {"neo4j-values.yaml", "neo4j-cluster-values.yaml", "prometheus-adapter-values.yaml"}
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding"}
CRD_KINDS = {"ScaledObject", "ServiceMonitor", "PodMonitor"}
WORKLOADS = {"Deployment", "StatefulSet", "Job"}
COMPONENTS = ("components/service-monitor", "components/latency-hpa")

Obj = dict[str, Any]


# --- loading: what `kubectl apply -k deploy/k8s` applies, without kubectl ---------------------------

def load_yaml(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kustomization(directory: Path = K8S) -> Obj:
    return load_yaml(directory / "kustomization.yaml")[0]  # type: ignore[no-any-return]


def render(directory: Path = K8S) -> list[Obj]:
    """The kustomization's resources with its namespace and image transforms applied (the only
    transforms deploy/k8s uses; kubectl's own build is compared with this one below)."""
    spec = kustomization(directory)
    images = {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in spec.get("images", [])}
    out = []
    for entry in spec["resources"]:
        for obj in load_yaml(directory / entry):
            obj = copy.deepcopy(obj)
            if spec.get("namespace") and obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = spec["namespace"]
            for container in containers(obj):
                container["image"] = images.get(container["image"], container["image"])
            out.append(obj)
    return out


def pod_spec(obj: Obj) -> Obj | None:
    return obj["spec"]["template"]["spec"] if obj["kind"] in WORKLOADS else None


def containers(obj: Obj, init: bool = True) -> list[Obj]:
    spec = pod_spec(obj)
    if spec is None:
        return []
    return [*(spec.get("initContainers", []) if init else []), *spec["containers"]]


def app_containers(objs: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload, container) for every container that runs the FactLoom image."""
    for obj in objs:
        for container in containers(obj):
            if container["image"].split(":")[0] == "factloom":
                yield obj, container


def find(objs: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def by_component(objs: list[Obj], component: str) -> Obj:
    found = [o for o in objs if o["kind"] in WORKLOADS
             and o["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    assert len(found) == 1, component
    return found[0]


def env_of(objs: list[Obj], container: Obj) -> dict[str, str]:
    """A container's environment: its envFrom ConfigMaps (Secrets' values too) and its env."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(find(objs, "ConfigMap", source["configMapRef"]["name"])["data"])
        else:
            env.update(find(objs, "Secret", source["secretRef"]["name"])["stringData"])
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def queues_of(command: list[str]) -> set[str]:
    return set(command[command.index("-Q") + 1].split(",")) if "-Q" in command else set()


def kubectl() -> str:
    exe = shutil.which("kubectl") or shutil.which("kustomize")
    if exe is None:
        pytest.skip("kubectl / kustomize not installed: render() checks the resources list instead")
    return exe


def kubectl_build(directory: Path) -> list[Obj]:
    exe = kubectl()
    args = [exe, "kustomize", str(directory)] if exe.endswith("kubectl") else [exe, "build", str(directory)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def with_components(tmp_path: Path) -> Path:
    """A copy of deploy/k8s with the optional components switched on, as the kustomization says."""
    copy_dir = tmp_path / "k8s"
    shutil.copytree(K8S, copy_dir)
    path = copy_dir / "kustomization.yaml"
    text = path.read_text()
    on = text.replace("# components:\n", "components:\n")
    for component in COMPONENTS:
        on = on.replace(f"#   - {component}\n", f"  - {component}\n")
    assert on != text and all(f"\n  - {c}\n" in on for c in COMPONENTS), "the components are not listed"
    path.write_text(on)
    return copy_dir


OBJECTS = render()


def ident(obj: Obj) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


# --- the kustomization --------------------------------------------------------------------------------

def test_every_manifest_is_listed_and_every_listed_file_exists() -> None:
    listed = kustomization()["resources"]
    assert len(listed) == len(set(listed))
    for entry in listed:
        assert (K8S / entry).is_file(), entry
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"} - HELM_VALUES
    assert on_disk == set(listed), "a manifest in deploy/k8s that the kustomization does not apply, or the reverse"
    for component in COMPONENTS:
        spec = kustomization(K8S / component)
        assert spec["kind"] == "Component"
        files = [*spec.get("resources", []), *(p["path"] for p in spec.get("patches", []))]
        assert {p.name for p in (K8S / component).glob("*.yaml")} - {"kustomization.yaml"} - HELM_VALUES == set(files)


def test_object_names_are_unique() -> None:
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in OBJECTS]
    assert len(keys) == len(set(keys))
    assert {o["metadata"].get("namespace") for o in OBJECTS if o["kind"] != "Namespace"} == {"factloom"}
    assert find(OBJECTS, "Namespace", "factloom")


def _summary(objs: list[Obj]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"],
             tuple(sorted(c["image"] for c in containers(o)))) for o in objs}


def test_kubectl_kustomize_builds_the_same_objects() -> None:
    assert _summary(kubectl_build(K8S)) == _summary(OBJECTS)


def test_the_optional_components_build_onto_the_base(tmp_path: Path) -> None:
    built = kubectl_build(with_components(tmp_path))
    assert _summary(built) - _summary(OBJECTS) == {
        ("ServiceMonitor", "factloom", "factloom-api", ()), ("PodMonitor", "factloom", "factloom-workers", ()),
    }
    hpa = find(built, "HorizontalPodAutoscaler", "factloom-api")
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Resource", "Pods"]  # the patch replaced the list
    for obj in built:
        if obj["kind"] in CRD_KINDS:
            jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


# --- schemas ---------------------------------------------------------------------------------------------

def _component_objects() -> list[Obj]:
    return [o for c in COMPONENTS for p in sorted((K8S / c).glob("*.yaml"))
            if p.name not in HELM_VALUES | {"kustomization.yaml"} for o in load_yaml(p)]


@pytest.mark.parametrize("obj", [o for o in OBJECTS + _component_objects() if o["kind"] not in CRD_KINDS], ids=ident)
def test_core_objects_validate_against_the_kubernetes_schemas(obj: Obj) -> None:
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_strict_validation_refuses_a_misspelt_field() -> None:
    """The schemas are strict: a typo is an error, not an ignored field."""
    deployment = copy.deepcopy(find(OBJECTS, "Deployment", "factloom-api"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


_METADATA = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
    "namespace": {"type": "string"}, "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_LABEL_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": _STRINGS,
    "matchExpressions": {"type": "array", "items": {
        "type": "object", "required": ["key", "operator"], "additionalProperties": False, "properties": {
            "key": {"type": "string"}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
            "values": {"type": "array", "items": {"type": "string"}}}}}}}
_DURATION = {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h))+$"}
_ENDPOINT = {"type": "object", "required": ["port"], "additionalProperties": False, "properties": {
    "port": {"type": "string"}, "path": {"type": "string"}, "interval": _DURATION,
    "scrapeTimeout": _DURATION, "scheme": {"enum": ["http", "https"]}}}


def _crd(api_version: str, kind: str, spec: Obj) -> Obj:
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
            "properties": {"apiVersion": {"const": api_version}, "kind": {"const": kind},
                           "metadata": _METADATA, "spec": spec}}


# KEDA 2.x ScaledObject (keda.sh/docs/2.x/reference/scaledobject-spec) with the redis (lists) trigger;
# trigger metadata is a map of strings: KEDA's CRD refuses a number there
CRD_SCHEMAS: dict[str, Obj] = {
    "ScaledObject": _crd("keda.sh/v1alpha1", "ScaledObject", {
        "type": "object", "required": ["scaleTargetRef", "triggers"], "additionalProperties": False,
        "properties": {
            "scaleTargetRef": {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "name": {"type": "string"},
                "envSourceContainerName": {"type": "string"}}},
            "pollingInterval": {"type": "integer", "minimum": 1},
            "cooldownPeriod": {"type": "integer", "minimum": 0},
            "initialCooldownPeriod": {"type": "integer", "minimum": 0},
            "idleReplicaCount": {"type": "integer", "minimum": 0},
            "minReplicaCount": {"type": "integer", "minimum": 0},
            "maxReplicaCount": {"type": "integer", "minimum": 1},
            "fallback": {"type": "object"}, "advanced": {"type": "object"},
            "triggers": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["type", "metadata"], "additionalProperties": False, "properties": {
                    "type": {"const": "redis"}, "name": {"type": "string"}, "useCachedMetrics": {"type": "boolean"},
                    "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                    "authenticationRef": {"type": "object", "required": ["name"]},
                    "metadata": {"type": "object", "required": ["listName", "listLength"],
                                 "additionalProperties": False, "properties": {key: {"type": "string"} for key in (
                                     "address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv",
                                     "usernameFromEnv", "passwordFromEnv", "listName", "listLength",
                                     "activationListLength", "enableTLS", "unsafeSsl", "databaseIndex")}}}}},
        }}),
    # Prometheus operator monitoring.coreos.com/v1 (prometheus-operator.dev/docs/api-reference)
    "ServiceMonitor": _crd("monitoring.coreos.com/v1", "ServiceMonitor", {
        "type": "object", "required": ["selector", "endpoints"], "additionalProperties": False, "properties": {
            "selector": _LABEL_SELECTOR, "jobLabel": {"type": "string"},
            "namespaceSelector": {"type": "object"},
            "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}}}),
    "PodMonitor": _crd("monitoring.coreos.com/v1", "PodMonitor", {
        "type": "object", "required": ["selector", "podMetricsEndpoints"], "additionalProperties": False,
        "properties": {
            "selector": _LABEL_SELECTOR, "jobLabel": {"type": "string"},
            "namespaceSelector": {"type": "object"},
            "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}}}),
}


@pytest.mark.parametrize("obj", [o for o in OBJECTS + _component_objects() if o["kind"] in CRD_KINDS], ids=ident)
def test_custom_resources_validate_against_their_documented_fields(obj: Obj) -> None:
    jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])


def test_the_scaledobject_schema_refuses_a_number_in_trigger_metadata() -> None:
    scaled = copy.deepcopy(find(OBJECTS, "ScaledObject", "factloom-worker"))
    scaled["spec"]["triggers"][0]["metadata"]["listLength"] = 8
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, CRD_SCHEMAS["ScaledObject"])


# --- cross-checks: the manifests agree with each other ------------------------------------------------

def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_services_select_pods_that_declare_their_target_ports() -> None:
    for service in (o for o in OBJECTS if o["kind"] == "Service"):
        pods = [o for o in OBJECTS if o["kind"] in WORKLOADS - {"Job"}
                and _matches(service["spec"]["selector"], o["spec"]["template"]["metadata"]["labels"])]
        assert pods, f"Service {service['metadata']['name']} selects no pod"
        for port in service["spec"]["ports"]:
            for pod in pods:
                declared = {p.get("name") for c in containers(pod, init=False) for p in c.get("ports", [])}
                declared |= {p["containerPort"] for c in containers(pod, init=False) for p in c.get("ports", [])}
                assert port["targetPort"] in declared, (service["metadata"]["name"], port)
    for set_ in (o for o in OBJECTS if o["kind"] == "StatefulSet"):
        find(OBJECTS, "Service", set_["spec"]["serviceName"])


def test_workload_selectors_match_their_templates() -> None:
    for obj in OBJECTS:
        if obj["kind"] in {"Deployment", "StatefulSet", "PodDisruptionBudget"}:
            labels_of = [o["spec"]["template"]["metadata"]["labels"] for o in OBJECTS if o["kind"] in WORKLOADS]
            selector = obj["spec"]["selector"]["matchLabels"]
            assert any(_matches(selector, labels) for labels in labels_of), ident(obj)
        if obj["kind"] in {"Deployment", "StatefulSet"}:
            assert _matches(obj["spec"]["selector"]["matchLabels"], obj["spec"]["template"]["metadata"]["labels"])


def test_references_to_configmaps_secrets_and_claims_resolve() -> None:
    for obj in OBJECTS:
        spec = pod_spec(obj)
        if spec is None:
            continue
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claim_templates = {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
        for volume in volumes.values():
            if "configMap" in volume:
                find(OBJECTS, "ConfigMap", volume["configMap"]["name"])
            if "persistentVolumeClaim" in volume:
                find(OBJECTS, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
        for container in containers(obj):
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in claim_templates, (ident(obj), mount)
            for source in container.get("envFrom", []):
                ref = source.get("configMapRef") or source["secretRef"]
                find(OBJECTS, "ConfigMap" if "configMapRef" in source else "Secret", ref["name"])
            for entry in container.get("env", []):
                if "valueFrom" in entry:
                    ref = entry["valueFrom"]["secretKeyRef"]
                    assert ref["key"] in find(OBJECTS, "Secret", ref["name"])["stringData"]


def test_every_factloom_variable_names_a_setting() -> None:
    """A misspelt FACTLOOM_* variable is silently ignored by pydantic-settings (extra="ignore")."""
    fields = {f"FACTLOOM_{name.upper()}" for name in Settings.model_fields}
    seen = set()
    for obj in OBJECTS:
        data = {**obj.get("data", {}), **obj.get("stringData", {})} if obj["kind"] in {"ConfigMap", "Secret"} else {}
        for container in containers(obj):
            data.update({e["name"]: "" for e in container.get("env", [])})
        for key in data:
            if key.startswith("FACTLOOM_"):
                seen.add(key)
                assert key in fields, f"{ident(obj)}: {key} is not a factloom.config.Settings field"
    assert {"FACTLOOM_HOME", "FACTLOOM_DATABASE_URL", "FACTLOOM_NEO4J_URI", "FACTLOOM_REDIS_URL"} <= seen


def test_every_factloom_container_gets_the_config_and_the_secrets() -> None:
    for obj, container in app_containers(OBJECTS):
        refs = {(next(iter(s)), next(iter(s.values()))["name"]) for s in container.get("envFrom", [])}
        assert refs == {("configMapRef", "factloom-config"), ("secretRef", "factloom-secrets")}, ident(obj)


def test_the_settings_point_at_the_stores_in_the_manifests() -> None:
    env = {**find(OBJECTS, "ConfigMap", "factloom-config")["data"],
           **find(OBJECTS, "Secret", "factloom-secrets")["stringData"]}
    settings = Settings(_env_file=None, **{k[len("FACTLOOM_"):].lower(): v for k, v in env.items()})  # type: ignore[call-arg]
    ledger = urlsplit(settings.sql_url)
    assert ledger.scheme == "postgresql+psycopg"
    postgres = find(OBJECTS, "StatefulSet", "postgres")
    pg_env = {e["name"]: e for e in postgres["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert ledger.hostname == postgres["spec"]["serviceName"]
    assert ledger.port == find(OBJECTS, "Service", "postgres")["spec"]["ports"][0]["port"]
    assert ledger.username == pg_env["POSTGRES_USER"]["value"]
    assert ledger.path.lstrip("/") == pg_env["POSTGRES_DB"]["value"]
    assert ledger.password == find(OBJECTS, "Secret", "postgres-auth")["stringData"]["POSTGRES_PASSWORD"]
    redis = urlsplit(settings.redis_url)
    assert (redis.hostname, redis.port) == ("redis", find(OBJECTS, "Service", "redis")["spec"]["ports"][0]["port"])
    # the Neo4j chart reads NEO4J_AUTH ("user/password") from the Secret its values name
    values = yaml.safe_load((K8S / "neo4j-values.yaml").read_text())
    auth = find(OBJECTS, "Secret", values["neo4j"]["passwordFromSecret"])["stringData"]["NEO4J_AUTH"]
    assert auth == "/".join(settings.neo4j_auth())
    assert urlsplit(settings.neo4j_uri).scheme in {"bolt", "bolt+s", "neo4j", "neo4j+s"}


def test_every_secret_value_is_a_placeholder() -> None:
    for secret in (o for o in OBJECTS if o["kind"] == "Secret"):
        assert "data" not in secret  # stringData only: placeholders a reader can see and replace
        for key, value in secret["stringData"].items():
            assert "CHANGE-ME" in value, f"{secret['metadata']['name']}.{key} holds a real-looking value"


def test_the_neo4j_helm_values() -> None:
    standalone = yaml.safe_load((K8S / "neo4j-values.yaml").read_text())
    cluster = yaml.safe_load((K8S / "neo4j-cluster-values.yaml").read_text())
    assert standalone["neo4j"]["edition"] == "community"
    assert standalone["services"]["neo4j"]["enabled"] is False  # no LoadBalancer for the standalone server
    assert cluster["neo4j"]["edition"] == "enterprise" and cluster["neo4j"]["acceptLicenseAgreement"] == "yes"
    assert cluster["neo4j"]["minimumClusterSize"] >= 3
    assert cluster["services"]["neo4j"]["spec"]["type"] == "ClusterIP"  # the routing bootstrap, in-cluster
    for values in (standalone, cluster):
        assert values["neo4j"]["passwordFromSecret"] == "neo4j-auth"
        assert values["volumes"]["data"]["mode"]
    # the routing URI the config documents for the cluster names the chart's Service over its servers
    config_text = (K8S / "config.yaml").read_text()
    assert f"neo4j://{cluster['neo4j']['name']}-lb-neo4j:7687" in config_text
    assert f"neo4j://{cluster['neo4j']['name']}-lb-neo4j:7687" in (K8S / "neo4j-cluster-values.yaml").read_text()


def test_the_neo4j_chart_version_is_the_tested_neo4j_version() -> None:
    from factloom.config import NEO4J_VERSION

    for name in ("neo4j-values.yaml", "neo4j-cluster-values.yaml"):
        versions = set(re.findall(r"--version (\S+)", (K8S / name).read_text()))
        assert versions == {NEO4J_VERSION}, name


# --- cross-checks: the manifests agree with the code ----------------------------------------------------

def test_images_are_the_project_image_at_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    found = {c["image"] for _, c in app_containers(OBJECTS)}
    assert found == {f"factloom:{version}"}
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    stores = {o["metadata"]["name"]: containers(o)[0]["image"] for o in OBJECTS if o["kind"] == "StatefulSet"}
    assert stores == {"postgres": compose["postgres"]["image"], "redis": compose["redis"]["image"]}


def _without_schedule(command: list[str]) -> list[str]:
    if "--schedule" in command:
        i = command.index("--schedule")
        return command[:i] + command[i + 2:]
    return command


def test_each_process_runs_the_command_docker_compose_runs() -> None:
    """The image's entry points, as docker-compose.yml (tested in test_compose.py) starts them."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for service, component in {"migrate": "migrate", "api": "api", "worker": "worker", "learner": "learner",
                               "beat": "beat"}.items():
        container = containers(by_component(OBJECTS, component), init=False)[0]
        assert _without_schedule(container["command"]) == _without_schedule(compose[service]["command"]), service
        assert "args" not in container


def test_the_factloom_commands_parse_and_celery_finds_the_app() -> None:
    from factloom.platform.cli import build_parser
    from factloom.workers.app import QUEUES, app

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    celery_apps = set()
    consumed: set[str] = set()
    for obj, container in app_containers(OBJECTS):
        command = container["command"]
        if command[0] == "factloom":
            assert "factloom" in scripts
            build_parser().parse_args(command[1:])  # exits (SystemExit) on an unknown command or flag
        elif command[0] == "celery":
            celery_apps.add(command[command.index("-A") + 1])
            assert set(queues_of(command)) <= set(QUEUES), ident(obj)
            consumed |= queues_of(command)
        else:
            assert command[:2] == ["python", "/etc/factloom/wait_for_migrations.py"], ident(obj)
    assert celery_apps == {"factloom.workers.app"} and app.main == "factloom"
    assert consumed == set(QUEUES), "a Celery queue no Deployment consumes"


def test_the_probes_are_the_apis_health_routes() -> None:
    from factloom.platform.system import router

    routes = {getattr(r, "path", None) for r in router.routes}
    api = containers(by_component(OBJECTS, "api"), init=False)[0]
    assert {"/readyz", "/healthz"} <= routes
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["startupProbe"]["httpGet"]["path"] == "/healthz"
    port = {p["name"]: p["containerPort"] for p in api["ports"]}
    command = api["command"]
    assert port[api["readinessProbe"]["httpGet"]["port"]] == int(command[command.index("--port") + 1]) == 8000


@pytest.mark.parametrize("component", ["api", "worker", "learner"])
def test_metrics_directories_are_per_pod(component: str) -> None:
    """The API wipes PROMETHEUS_MULTIPROC_DIR at start and a worker's main process serves what its
    children write there: on the shared home the pods would wipe and sum each other's counts."""
    from factloom.metrics import MULTIPROC_ENV

    obj = by_component(OBJECTS, component)
    container = containers(obj, init=False)[0]
    env = env_of(OBJECTS, container)
    directory = env[MULTIPROC_ENV]
    assert not Path(directory).is_relative_to(env["FACTLOOM_HOME"])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == directory)
    volume = next(v for v in obj["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert "emptyDir" in volume


def test_processes_that_share_files_mount_the_shared_home() -> None:
    claim = find(OBJECTS, "PersistentVolumeClaim", "factloom-home")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for component in ("api", "worker", "learner"):
        obj = by_component(OBJECTS, component)
        container = containers(obj, init=False)[0]
        home = env_of(OBJECTS, container)["FACTLOOM_HOME"]
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == home)
        volume = next(v for v in pod_spec(obj)["volumes"] if v["name"] == mount["name"])  # type: ignore[index]
        assert volume["persistentVolumeClaim"]["claimName"] == "factloom-home", component


def test_workers_expose_their_metrics_port() -> None:
    for component in ("worker", "learner"):
        obj = by_component(OBJECTS, component)
        container = containers(obj, init=False)[0]
        port = int(env_of(OBJECTS, container)["FACTLOOM_WORKER_METRICS_PORT"])
        assert port == 9100
        assert {"name": "metrics", "containerPort": port} in container["ports"]
        assert obj["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    monitor = next(o for o in _component_objects() if o["kind"] == "PodMonitor")
    selected = [o for o in OBJECTS if o["kind"] == "Deployment"
                and _matches(monitor["spec"]["selector"]["matchLabels"], o["spec"]["template"]["metadata"]["labels"])
                and o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
                in monitor["spec"]["selector"]["matchExpressions"][0]["values"]]
    assert {o["metadata"]["name"] for o in selected} == {"factloom-worker", "factloom-learner"}
    service_monitor = next(o for o in _component_objects() if o["kind"] == "ServiceMonitor")
    api_service = find(OBJECTS, "Service", "factloom-api")
    assert _matches(service_monitor["spec"]["selector"]["matchLabels"], api_service["metadata"]["labels"])
    assert service_monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in api_service["spec"]["ports"]}


def test_the_latency_metric_comes_from_the_apis_histogram() -> None:
    from factloom.platform.metrics import REQUEST_SECONDS

    values = yaml.safe_load((K8S / "components/latency-hpa/prometheus-adapter-values.yaml").read_text())
    rule = values["rules"]["custom"][0]
    assert rule["seriesQuery"].startswith(f"{REQUEST_SECONDS._name}_bucket{{")  # noqa: SLF001 - the metric's name
    assert 'route="/v1/query"' in rule["seriesQuery"]
    hpa = next(o for o in _component_objects() if o["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][1]["pods"]["metric"]["name"] == rule["name"]["as"]


# --- scaling ---------------------------------------------------------------------------------------------

def test_hpas_and_scaledobjects_target_existing_deployments_once_each() -> None:
    targets = []
    for obj in OBJECTS:
        if obj["kind"] == "HorizontalPodAutoscaler":
            ref = obj["spec"]["scaleTargetRef"]
            assert (ref["apiVersion"], ref["kind"]) == ("apps/v1", "Deployment")
            targets.append(find(OBJECTS, "Deployment", ref["name"])["metadata"]["name"])
        elif obj["kind"] == "ScaledObject":
            ref = obj["spec"]["scaleTargetRef"]
            assert ref.get("kind", "Deployment") == "Deployment"
            targets.append(find(OBJECTS, "Deployment", ref["name"])["metadata"]["name"])
    # two autoscalers on one Deployment fight over its replica count (KEDA makes an HPA of its own)
    assert len(targets) == len(set(targets))
    assert set(targets) == {"factloom-api", "factloom-worker", "factloom-learner"}


def test_workers_scale_on_the_redis_list_of_the_queue_they_consume() -> None:
    from factloom.workers.app import QUEUES

    env = find(OBJECTS, "ConfigMap", "factloom-config")["data"]
    redis_url = urlsplit(env["FACTLOOM_REDIS_URL"])
    namespace = kustomization()["namespace"]
    scaled_lists = {}
    for scaled in (o for o in OBJECTS if o["kind"] == "ScaledObject"):
        deployment = find(OBJECTS, "Deployment", scaled["spec"]["scaleTargetRef"]["name"])
        command = containers(deployment, init=False)[0]["command"]
        for trigger in scaled["spec"]["triggers"]:
            meta = trigger["metadata"]
            assert trigger["type"] == "redis"
            assert meta["listName"] in QUEUES and meta["listName"] in queues_of(command), scaled["metadata"]["name"]
            scaled_lists[meta["listName"]] = scaled
            # KEDA's operator runs in its own namespace: the Service by its full name, in this namespace
            host, port = meta["address"].rsplit(":", 1)
            assert host == f"{redis_url.hostname}.{namespace}.svc.cluster.local"
            assert int(port) == redis_url.port
            assert meta["databaseIndex"] == redis_url.path.lstrip("/")
            assert int(meta["listLength"]) >= 1
        assert scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
    assert set(scaled_lists) == {"check", "learn"}
    # the check worker also serves `ingest` (sweeper, embeddings, the learn plan): never scaled to zero
    assert scaled_lists["check"]["spec"]["minReplicaCount"] >= 1


def test_one_learn_update_per_pod_and_a_single_beat() -> None:
    learner = containers(by_component(OBJECTS, "learner"), init=False)[0]
    command = learner["command"]
    assert command[command.index("-c") + 1] == "1"
    assert env_of(OBJECTS, learner)["FACTLOOM_WORKER_CONCURRENCY"] == "1"
    beat = by_component(OBJECTS, "beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"
    # a scale-down's SIGTERM is Celery's warm shutdown: the running update must fit the grace period
    assert by_component(OBJECTS, "learner")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 1800


def test_every_factloom_pod_waits_for_the_migrations_and_the_job_runs_them() -> None:
    job = find(OBJECTS, "Job", "factloom-migrate")
    assert containers(job, init=False)[0]["command"] == ["factloom", "migrate"]
    assert job["spec"]["backoffLimit"] >= 5  # the stores may still be starting
    for obj in OBJECTS:
        if obj["kind"] == "Deployment":
            init = obj["spec"]["template"]["spec"]["initContainers"]
            assert [c["command"] for c in init] == [["python", "/etc/factloom/wait_for_migrations.py"]], ident(obj)
            assert init[0]["image"] == containers(obj, init=False)[0]["image"]


# --- the init container's script, run against a real ledger --------------------------------------------

def _wait_script(tmp_path: Path) -> Path:
    script = tmp_path / "wait_for_migrations.py"
    script.write_text(find(OBJECTS, "ConfigMap", "factloom-wait-for-migrations")["data"]["wait_for_migrations.py"])
    return script


def test_the_wait_for_migrations_script_waits_for_the_head_then_exits(tmp_path: Path) -> None:
    from factloom.platform.migrate import migrate_sql

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    env = {**os.environ, "FACTLOOM_DATABASE_URL": url, "FACTLOOM_HOME": str(tmp_path)}
    script = _wait_script(tmp_path)
    waiting = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=env,  # noqa: S603
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert waiting.stdout is not None
        first = waiting.stdout.readline()
        assert first.startswith("ledger at None, waiting for the migrate Job"), first
        time.sleep(1.0)
        assert waiting.poll() is None, "it must keep waiting while the ledger is not migrated"
    finally:
        waiting.kill()
        waiting.wait()
    migrate_sql(url)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True,  # noqa: S603
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "migrated" in done.stdout


# --- the routing scheme against the test Neo4j (a single Community server routes to itself) ------------

@pytest.mark.integration
def test_the_routing_scheme_reads_and_writes_through_the_store(neo4j_service: Any, settings: Settings) -> None:
    import neo4j

    from factloom.graph import Neo4jStore
    from factloom.graph.types import FactWrite
    from factloom.platform.migrate import migrate_graph

    port = urlsplit(settings.neo4j_uri).port
    routed = settings.model_copy(update={"neo4j_uri": f"neo4j://127.0.0.1:{port}"})
    migrate_graph(routed)  # the schema steps, as the migrate Job runs them
    store = Neo4jStore(routed.neo4j_uri, routed.neo4j_auth())
    kb = "deploy-routing"
    try:
        assert isinstance(store._driver, neo4j.Neo4jDriver)  # noqa: SLF001 - the routing driver, not the direct one
        assert store.ping()
        store.drop_kb(kb)  # an implicit write transaction, routed to the writer
        facts = [FactWrite(fact_id=f"routing-{i}", subject=f"Film {i}", predicate="directed_by",
                           object="Someone", source="t") for i in range(3)]
        assert store.write_facts(kb, facts) == 3  # a managed write transaction (WRITE routing)
        assert {f.fact_id for f in store.facts_by_id(kb, [f.fact_id for f in facts])} == {f.fact_id for f in facts}
        assert store.count(kb) == (4, 3)  # reads routed as reads
        assert sum(1 for _ in store.dump("Entity")) >= 4  # the backup's read session
    finally:
        store.drop_kb(kb)
        store.close()


@pytest.mark.integration
def test_the_local_neo4j_service_reads_host_and_port_from_a_routing_uri(neo4j_service: Any, settings: Settings) -> None:
    from factloom.platform.services import Neo4jService

    port = urlsplit(settings.neo4j_uri).port
    service = Neo4jService(settings.model_copy(update={"neo4j_uri": f"neo4j://127.0.0.1:{port}"}))
    assert (service.host, service.port) == ("127.0.0.1", port)
    assert service.probe()
    tls = Neo4jService(settings.model_copy(update={"neo4j_uri": "neo4j+s://graph.example.com:7688"}))
    assert (tls.host, tls.port) == ("graph.example.com", 7688)
