"""Kubernetes manifests: every rendered overlay (and every plain manifest file) validates against the Kubernetes
schemas offline (kubernetes-validate ships them; the Prometheus Operator's ServiceMonitor and PrometheusRule against
models generated from its CRDs), and the objects carry what a production rollout relies on."""

from __future__ import annotations

import re

import pytest
import yaml
from cloudcoil.models.prometheus_operator import v1 as prometheus_operator
from kubernetes_validate import utils as kv
from prometheus_client import generate_latest
from pydantic import ValidationError

from tests.deploy.manifests import K8S, KUSTOMIZATIONS, containers, load_all, merge_render, pod_spec, render, renderer

VERSION = kv.latest_version()


def by_kind(resources: list[dict]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for resource in resources:
        kinds.setdefault(resource["kind"], []).append(resource)
    return kinds


def one(resources: list[dict], kind: str, name: str) -> dict:
    return next(r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name)


PROMETHEUS_OPERATOR = {
    "ServiceMonitor": prometheus_operator.ServiceMonitor,
    "PrometheusRule": prometheus_operator.PrometheusRule,
}


def assert_valid(resource: dict) -> None:
    name = f"{resource['kind']}/{resource['metadata']['name']}"
    if resource["apiVersion"] == "monitoring.coreos.com/v1":
        model = PROMETHEUS_OPERATOR[resource["kind"]]
        try:
            parsed = model.model_validate(resource)
        except ValidationError as e:
            pytest.fail(f"{name}: {e}")
        # The models ignore fields they do not know: one dropped in the round trip is a misspelt or misplaced field.
        assert parsed.model_dump(by_alias=True, exclude_unset=True, mode="json") == resource, f"{name}: unknown fields"
        return
    try:
        kv.validate(resource, VERSION, strict=True)
    except kv.ValidationError as e:
        pytest.fail(f"{name}: {e.message} at {list(e.path)}")


def patch_files() -> set:
    """The partial objects kustomizations merge into others (overlays' and components' patches)."""
    return {
        kustomization.parent / entry["path"]
        for kustomization in K8S.rglob("kustomization.yaml")
        for entry in yaml.safe_load(kustomization.read_text()).get("patches", [])
    }


def plain_manifests() -> list:
    """Manifest files that are whole objects (not kustomizations, not patches)."""
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml" and p not in patch_files())


@pytest.mark.parametrize("path", plain_manifests(), ids=lambda p: str(p.relative_to(K8S)))
def test_every_manifest_file_validates(path):
    resources = load_all(path)
    assert resources
    for resource in resources:
        assert_valid(resource)


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(K8S)))
def test_every_rendered_kustomization_validates(folder):
    resources = render(folder)
    assert resources
    for resource in resources:
        assert_valid(resource)


def test_schema_validation_catches_a_defect():
    bad = yaml.safe_load((K8S / "base" / "deployment.yaml").read_text())
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "eight thousand"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSION, strict=True)
    bad = yaml.safe_load((K8S / "base" / "service.yaml").read_text())
    bad["spec"]["portz"] = []
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSION, strict=True)


@pytest.mark.parametrize("overlay", ["cpu", "gpu"])
def test_overlay_has_the_whole_deployment(overlay):
    resources = render(K8S / "overlays" / overlay)
    kinds = by_kind(resources)
    for kind in (
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ConfigMap",
        "Secret",
        "NetworkPolicy",
        "StatefulSet",
    ):
        assert kind in kinds, kind

    deployment = one(resources, "Deployment", "metricsearch")
    pod = pod_spec(deployment)
    (service,) = pod["containers"]
    assert service["image"] == f"registry.example.com/metricsearch:{overlay}"
    assert service["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert service["livenessProbe"]["httpGet"]["path"] == service["startupProbe"]["httpGet"]["path"] == "/livez"
    for key in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(service["resources"][key]), key
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    security = service["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert any(m["mountPath"] == "/tmp" for m in service["volumeMounts"]), "a read-only root needs a writable /tmp"
    gpus = {k: v.get("nvidia.com/gpu") for k, v in service["resources"].items()}
    assert gpus == ({"requests": "1", "limits": "1"} if overlay == "gpu" else {"requests": None, "limits": None})

    hpa = one(resources, "HorizontalPodAutoscaler", "metricsearch")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "metricsearch"
    assert hpa["spec"]["minReplicas"] >= 1 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    selector = {"app.kubernetes.io/name": "metricsearch"}
    assert one(resources, "PodDisruptionBudget", "metricsearch")["spec"]["selector"]["matchLabels"] == selector
    assert one(resources, "Service", "metricsearch")["spec"]["selector"] == selector


def test_qdrant_is_a_three_node_cluster_with_volumes_and_a_replicated_sharded_collection():
    resources = render(K8S / "overlays" / "cpu")
    qdrant = one(resources, "StatefulSet", "qdrant")
    assert qdrant["spec"]["replicas"] == 3
    assert qdrant["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "qdrant-storage"
    (node,) = pod_spec(qdrant)["containers"]
    assert any(m["name"] == "qdrant-storage" and m["mountPath"] == "/qdrant/storage" for m in node["volumeMounts"])
    assert node["securityContext"]["readOnlyRootFilesystem"] is True
    config = one(resources, "ConfigMap", "qdrant-config")["data"]
    assert yaml.safe_load(config["production.yaml"])["cluster"]["enabled"] is True
    assert "--bootstrap" in config["start.sh"] and "qdrant-headless" in config["start.sh"]
    headless = one(resources, "Service", "qdrant-headless")
    assert headless["spec"]["clusterIP"] == "None" and qdrant["spec"]["serviceName"] == "qdrant-headless"

    settings = one(resources, "ConfigMap", "metricsearch-settings")["data"]
    assert settings["MS_QDRANT_URL"] == "http://qdrant:6333"
    assert int(settings["MS_QDRANT_REPLICATION"]) == 2 and int(settings["MS_QDRANT_SHARDS"]) > 1
    secret = one(resources, "Secret", "metricsearch-keys")
    assert {"MS_API_KEY", "MS_QDRANT_API_KEY"} <= set(secret["stringData"])


def test_loadtest_job_is_bounded_and_targets_the_service():
    (job,) = render(K8S / "loadtest")
    assert job["kind"] == "Job" and job["spec"]["activeDeadlineSeconds"] > 0
    locust = pod_spec(job)["containers"][0]
    assert "--host=http://metricsearch" in locust["args"]
    assert any(a.startswith("--run-time=") for a in locust["args"])
    for container in containers(job):
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.skipif(renderer() is None, reason="neither kubectl nor kustomize on PATH: nothing to compare with")
@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(K8S)))
def test_fallback_render_matches_kustomize(folder):
    def key(r: dict) -> tuple:
        return r["kind"], r["metadata"]["name"]

    assert sorted(merge_render(folder), key=key) == sorted(render(folder), key=key)


def test_prometheus_operator_validation_catches_a_defect():
    monitor = yaml.safe_load((K8S / "components" / "monitoring" / "servicemonitor.yaml").read_text())
    monitor["spec"]["endpoints"][0]["interval"] = "fast"
    with pytest.raises(pytest.fail.Exception, match="interval"):
        assert_valid(monitor)
    monitor = yaml.safe_load((K8S / "components" / "monitoring" / "servicemonitor.yaml").read_text())
    monitor["spec"]["endpoints"][0]["scrape_timeout"] = monitor["spec"]["endpoints"][0].pop("scrapeTimeout")
    with pytest.raises(AssertionError, match="unknown fields"):
        assert_valid(monitor)


def test_monitoring_component_scrapes_the_metrics_port_and_alerts_on_errors_latency_and_queue():
    resources = render(K8S / "overlays" / "cpu-monitoring")
    port = int(one(resources, "ConfigMap", "metricsearch-settings")["data"]["MS_METRICS_PORT"])
    (container,) = pod_spec(one(resources, "Deployment", "metricsearch"))["containers"]
    assert {"name": "metrics", "containerPort": port} in container["ports"]
    assert container["readinessProbe"]["httpGet"]["port"] == "http"  # probes stay on the API port
    service = one(resources, "Service", "metricsearch")
    assert {"name": "metrics", "port": port, "targetPort": "metrics"} in service["spec"]["ports"]
    monitor = one(resources, "ServiceMonitor", "metricsearch")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    policy = one(resources, "NetworkPolicy", "metricsearch-metrics")
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [port]

    rules = [r for g in one(resources, "PrometheusRule", "metricsearch")["spec"]["groups"] for r in g["rules"]]
    expressions = " ".join(r["expr"] for r in rules)
    assert 'status=~"5.."' in expressions and "histogram_quantile(0.99" in expressions
    assert "metricsearch_query_queue_depth" in expressions
    # Every series an alert reads is one the service exports (a renamed metric would silence its alert).
    exported = generate_latest(_service_registry()).decode()
    for name in set(re.findall(r"([a-z_:][a-z0-9_:]*)\{", expressions)):
        family = re.sub(r"_(bucket|count|sum|total)$", "", name)
        assert f"# TYPE {family} " in exported or f"# TYPE {name} " in exported, name


def _service_registry():
    from metricsearch.service.metrics import Metrics

    metrics = Metrics(item_count=lambda: 0.0)
    metrics.http()  # registers the instrumentator's series
    return metrics.registry
