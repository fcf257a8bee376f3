"""The Kubernetes manifests of k8s/: each overlay rendered, validated and checked for intent.

The overlays are rendered by the small kustomize implementation in ``kustomize.py``; where a
real kustomize (``kustomize`` or ``kubectl kustomize``) is on PATH, its output must be the same.
No cluster is needed: objects are validated against the Kubernetes OpenAPI schemas shipped by
kubernetes-validate.
"""

from __future__ import annotations

import copy
import math
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.config import serving_threads

from .conftest import K8S_DIR, OVERLAYS, REPO_ROOT
from .kustomize import (
    KustomizeError,
    Obj,
    UnsupportedFeatureError,
    build,
    resource_id,
    split_image,
)

NAMESPACE = "tailor"
APP = "tailor"
SECRET_NAME = "tailor-secrets"
CONFIGMAP_NAME = "tailor-config"
CONTAINER_PORT = 8000
# The oldest Kubernetes minor these manifests are meant for, and the newest the package knows.
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())
SENSITIVE = re.compile(r"(PASSWORD|SECRET|TOKEN|API_KEY|DATABASE_URL|CREDENTIAL)", re.I)
POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")

overlay_param = pytest.mark.parametrize("overlay", OVERLAYS)


# --- helpers ------------------------------------------------------------------------------


def get(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_spec(obj: Obj) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def pod_labels(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = obj["spec"]["template"]["metadata"]["labels"]
    return labels


def workloads(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in POD_TEMPLATE_KINDS]


def containers(obj: Obj) -> list[dict[str, Any]]:
    spec = pod_spec(obj)
    return [*spec.get("initContainers", []), *spec["containers"]]


def container(obj: Obj, name: str) -> dict[str, Any]:
    found = [c for c in containers(obj) if c["name"] == name]
    assert len(found) == 1, f"{obj['kind']}/{obj['metadata']['name']}: no container {name}"
    return found[0]


def env_var(c: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [e for e in c.get("env", []) if e["name"] == name]
    assert len(found) == 1, f"container {c['name']}: expected env {name} once"
    return found[0]


def tailor_image(obj: Obj) -> bool:
    """Whether a workload runs the Tailor image (not, say, the LLM server)."""
    return any(split_image(c["image"])[0].endswith("/" + APP) for c in containers(obj))


def config_data(objects: list[Obj]) -> dict[str, str]:
    data: dict[str, str] = get(objects, "ConfigMap", CONFIGMAP_NAME)["data"]
    return data


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) for every scalar under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")
    else:
        yield path, node


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def resolve_port(c: dict[str, Any], port: int | str) -> int:
    """The container port number that a probe's or Service's (named) port refers to."""
    if isinstance(port, int):
        return port
    numbers = [p["containerPort"] for p in c.get("ports", []) if p.get("name") == port]
    assert numbers, f"container {c['name']} has no port named {port!r}"
    return int(numbers[0])


# --- schema validation --------------------------------------------------------------------


@overlay_param
@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schema(
    rendered: dict[str, list[Obj]], overlay: str, k8s_version: str
) -> None:
    for obj in rendered[overlay]:
        kubernetes_validate.validate(obj, k8s_version, strict=True)


@pytest.mark.parametrize(
    "breakage",
    ["misspelt_field", "wrong_type", "missing_selector", "bad_quantity"],
)
def test_a_broken_deployment_fails_validation(
    rendered: dict[str, list[Obj]], breakage: str
) -> None:
    broken = copy.deepcopy(get(rendered["cpu"], "Deployment", APP))
    first = pod_spec(broken)["containers"][0]
    if breakage == "misspelt_field":
        first["readinesProbe"] = first.pop("readinessProbe")
    elif breakage == "wrong_type":
        first["ports"][0]["containerPort"] = "eight thousand"
    elif breakage == "missing_selector":
        del broken["spec"]["selector"]
    else:
        first["resources"]["limits"]["cpu"] = {"cores": 2}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


@overlay_param
def test_every_object_is_identified_and_namespaced(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    objects = rendered[overlay]
    assert objects
    for obj in objects:
        assert obj.get("apiVersion") and obj.get("kind"), obj
        assert obj["metadata"].get("name"), obj
        assert obj["metadata"].get("namespace") == NAMESPACE, resource_id(obj)
        assert obj["metadata"]["labels"].get("app.kubernetes.io/part-of") == APP
        assert obj["metadata"]["labels"].get("tailor/flavor") == overlay
    kinds = {o["kind"] for o in objects}
    assert {
        "ConfigMap",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Job",
    } <= kinds


# --- the Tailor Deployment ----------------------------------------------------------------


@overlay_param
def test_probes_hit_readyz_and_healthz_on_the_container_port(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    c = container(get(rendered[overlay], "Deployment", APP), APP)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": CONTAINER_PORT}
    expected = {
        "readinessProbe": "/readyz",
        "livenessProbe": "/healthz",
        "startupProbe": "/healthz",
    }
    for probe_name, path in expected.items():
        probe = c[probe_name]["httpGet"]
        assert probe["path"] == path, probe_name
        assert resolve_port(c, probe["port"]) == CONTAINER_PORT, probe_name
    startup = c["startupProbe"]
    # Generous enough for model loading: at least five minutes before liveness takes over.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


@overlay_param
def test_the_container_serves_the_api(rendered: dict[str, list[Obj]], overlay: str) -> None:
    c = container(get(rendered[overlay], "Deployment", APP), APP)
    assert c["command"] == ["tailor", "serve", "--host", "0.0.0.0", "--port", str(CONTAINER_PORT)]


@overlay_param
def test_pods_run_unprivileged_on_a_read_only_root(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    objects = rendered[overlay]
    data_dir = config_data(objects)["TAILOR_DATA_DIR"]
    tailor_workloads = [w for w in workloads(objects) if tailor_image(w)]
    assert {w["kind"] for w in tailor_workloads} == {"Deployment", "Job"}
    for workload in tailor_workloads:
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001
        assert spec["automountServiceAccountToken"] is False
        empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for c in containers(workload):
            context = c["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            # Every writable path the service needs is an emptyDir.
            for path in (data_dir, "/tmp"):
                assert mounts.get(path) in empty_dirs, (workload["kind"], path)


@overlay_param
def test_every_container_has_requests_and_limits(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    for workload in workloads(rendered[overlay]):
        for c in containers(workload):
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][bound]), (c["name"], bound)


def cpu_cores(quantity: str | int) -> float:
    text = str(quantity)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


@overlay_param
def test_onnx_threads_follow_the_cpu_limit(rendered: dict[str, list[Obj]], overlay: str) -> None:
    objects = rendered[overlay]
    c = container(get(objects, "Deployment", APP), APP)
    ref = env_var(c, "TAILOR_ONNX_INTRA_OP_THREADS")["valueFrom"]["resourceFieldRef"]
    # Half the limit, rounded up by Kubernetes: the service's own default (serving_threads).
    assert ref == {"containerName": APP, "resource": "limits.cpu", "divisor": "2"}
    limit = cpu_cores(c["resources"]["limits"]["cpu"])
    assert limit >= 1
    assert limit.is_integer()
    assert math.ceil(limit / 2) == serving_threads(int(limit))
    # A fixed value in the ConfigMap would be shadowed, and stale once the limit changes.
    assert "TAILOR_ONNX_INTRA_OP_THREADS" not in config_data(objects)


@overlay_param
def test_settings_come_from_the_configmap(rendered: dict[str, list[Obj]], overlay: str) -> None:
    objects = rendered[overlay]
    data = config_data(objects)
    assert all(key.startswith("TAILOR_") for key in data)
    assert data["TAILOR_AUTO_MIGRATE"] == "false"
    assert data["TAILOR_DATA_DIR"].startswith("/")
    for workload in workloads(objects):
        if tailor_image(workload):
            for c in containers(workload):
                assert {"configMapRef": {"name": CONFIGMAP_NAME}} in c["envFrom"]


# --- secrets --------------------------------------------------------------------------------


def secret_refs(objects: list[Obj]) -> set[tuple[str, str]]:
    refs: set[tuple[str, str]] = set()
    for workload in workloads(objects):
        for c in containers(workload):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.add((ref["name"], ref["key"]))
            for source in c.get("envFrom", []):
                assert "secretRef" not in source, "secrets are referenced key by key"
    return refs


@overlay_param
def test_secrets_are_referenced_never_inlined(rendered: dict[str, list[Obj]], overlay: str) -> None:
    objects = rendered[overlay]
    assert not [o for o in objects if o["kind"] == "Secret"], "the operator creates the Secret"
    assert not [k for k in config_data(objects) if SENSITIVE.search(k)]
    for workload in workloads(objects):
        for c in containers(workload):
            for e in c.get("env", []):
                if SENSITIVE.search(e["name"]):
                    assert "value" not in e, f"{e['name']} is inlined"
                    assert e["valueFrom"]["secretKeyRef"]["name"] == SECRET_NAME, e["name"]
    for path, value in walk(objects):
        # No URL with credentials (scheme://user:password@host) anywhere.
        assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", str(value)), path
    assert {s for s, _ in secret_refs(objects)} == {SECRET_NAME}

    deployment = container(get(objects, "Deployment", APP), APP)
    database = env_var(deployment, "TAILOR_DATABASE_URL")["valueFrom"]["secretKeyRef"]
    assert database == {"name": SECRET_NAME, "key": "TAILOR_DATABASE_URL"}
    api_key = env_var(deployment, "TAILOR_LLM_API_KEY")["valueFrom"]["secretKeyRef"]
    assert api_key["name"] == SECRET_NAME
    assert api_key["key"] == "TAILOR_LLM_API_KEY"


@overlay_param
def test_every_secret_key_is_documented(rendered: dict[str, list[Obj]], overlay: str) -> None:
    docs = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    for name, key in secret_refs(rendered[overlay]):
        assert name in docs
        assert key in docs, f"docs/deploy.md does not say how to set {name}/{key}"


# --- Service, autoscaler, disruption budget -------------------------------------------------


@overlay_param
def test_the_service_selects_exactly_the_api_pods(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    objects = rendered[overlay]
    service = get(objects, "Service", APP)
    deployment = get(objects, "Deployment", APP)
    assert service["spec"]["type"] == "ClusterIP"
    selector = service["spec"]["selector"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels(deployment))
    assert selects(selector, pod_labels(deployment))
    others = [w for w in workloads(objects) if w is not deployment]
    assert others, "the migration Job at least"
    for other in others:
        assert not selects(selector, pod_labels(other)), other["metadata"]["name"]
    [port] = service["spec"]["ports"]
    assert port["name"] == "http"
    assert port["port"] == 80
    assert resolve_port(container(deployment, APP), port["targetPort"]) == CONTAINER_PORT


@overlay_param
def test_the_autoscaler_targets_the_deployment(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    objects = rendered[overlay]
    hpa = get(objects, "HorizontalPodAutoscaler", APP)
    deployment = get(objects, "Deployment", APP)
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": deployment["apiVersion"],
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert 2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    metrics = [m["resource"] for m in hpa["spec"]["metrics"] if m["type"] == "Resource"]
    assert any(m["name"] == "cpu" and m["target"]["type"] == "Utilization" for m in metrics)
    # The autoscaler owns the replica count; a fixed one would be reset on every apply.
    assert "replicas" not in deployment["spec"]
    # Utilization is measured against requests, so the container must request CPU.
    assert "cpu" in container(deployment, APP)["resources"]["requests"]


@overlay_param
def test_the_disruption_budget_covers_the_deployment(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    objects = rendered[overlay]
    pdb = get(objects, "PodDisruptionBudget", APP)
    deployment = get(objects, "Deployment", APP)
    hpa = get(objects, "HorizontalPodAutoscaler", APP)
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 1
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert selects(selector, pod_labels(deployment))
    for other in workloads(objects):
        if other is not deployment:
            assert not selects(selector, pod_labels(other)), other["metadata"]["name"]
    # With fewer replicas than minAvailable + 1 no node could ever be drained.
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["minAvailable"]


# --- migration Job --------------------------------------------------------------------------


@overlay_param
def test_the_migration_job_runs_tailor_migrate_with_the_same_image_and_secret(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    objects = rendered[overlay]
    job = get(objects, "Job", "tailor-migrate")
    api = container(get(objects, "Deployment", APP), APP)
    [migrate] = containers(job)
    assert migrate["command"] == ["tailor", "migrate"]
    assert migrate["image"] == api["image"]
    assert env_var(migrate, "TAILOR_DATABASE_URL") == env_var(api, "TAILOR_DATABASE_URL")
    assert migrate["envFrom"] == api["envFrom"]
    assert env_var(migrate, "TAILOR_LOAD_MODELS")["value"] == "false"
    spec = job["spec"]
    assert 0 < spec["backoffLimit"] <= 6
    assert spec["ttlSecondsAfterFinished"] > 0
    assert pod_spec(job)["restartPolicy"] in ("Never", "OnFailure")


# --- images and flavours --------------------------------------------------------------------


@overlay_param
def test_images_are_set_by_the_overlay(rendered: dict[str, list[Obj]], overlay: str) -> None:
    objects = rendered[overlay]
    images = {c["image"] for w in workloads(objects) if tailor_image(w) for c in containers(w)}
    assert len(images) == 1, images
    [image] = images
    name, tag, digest = split_image(image)
    assert "/" in name, "a registry path, not the placeholder"
    assert tag or digest
    assert tag.endswith("-gpu") == (overlay == "gpu")
    for workload in workloads(objects):
        for c in containers(workload):
            assert split_image(c["image"])[1], f"{c['name']}: untagged image {c['image']}"


def gpu_requests(obj: Obj) -> list[str]:
    return [
        c["name"]
        for c in containers(obj)
        if "nvidia.com/gpu" in c["resources"].get("limits", {})
        or "nvidia.com/gpu" in c["resources"].get("requests", {})
    ]


def test_the_gpu_overlay_schedules_onto_gpus_with_the_cuda_image(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["gpu"]
    deployment = get(objects, "Deployment", APP)
    c = container(deployment, APP)
    assert str(c["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    assert c["image"].endswith("-gpu")
    assert config_data(objects)["TAILOR_ONNX_PROVIDER"] == "cuda"
    spec = pod_spec(deployment)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    # The base's settings survive the patch.
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert "TAILOR_DATABASE_URL" in {e["name"] for e in c["env"]}
    assert c["resources"]["requests"]["cpu"] == "2"
    assert c["resources"]["limits"]["cpu"] == "2"


def test_the_gpu_overlay_serves_an_openai_compatible_llm(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["gpu"]
    data = config_data(objects)
    url = re.fullmatch(r"http://([a-z0-9-]+):(\d+)/v1", data["TAILOR_LLM_BASE_URL"])
    assert url, data["TAILOR_LLM_BASE_URL"]
    service = get(objects, "Service", url.group(1))
    llm = get(objects, "Deployment", url.group(1))
    [port] = [p for p in service["spec"]["ports"] if p["port"] == int(url.group(2))]
    assert selects(service["spec"]["selector"], pod_labels(llm))
    [server] = containers(llm)
    assert resolve_port(server, port["targetPort"]) == CONTAINER_PORT
    assert split_image(server["image"])[0] == "vllm/vllm-openai"
    assert gpu_requests(llm) == [server["name"]]
    # The server loads and serves, under its own name, the model Tailor asks for.
    model = env_var(server, "TAILOR_LLM_MODEL")["valueFrom"]["configMapKeyRef"]
    assert model == {"name": CONFIGMAP_NAME, "key": "TAILOR_LLM_MODEL"}
    assert data["TAILOR_LLM_MODEL"]
    assert "--model=$(TAILOR_LLM_MODEL)" in server["args"]
    assert "--served-model-name=$(TAILOR_LLM_MODEL)" in server["args"]
    assert "--port=8000" in server["args"]
    assert server["readinessProbe"]["httpGet"]["path"] == "/health"


def test_the_cpu_overlay_requests_no_gpu(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["cpu"]
    assert config_data(objects)["TAILOR_ONNX_PROVIDER"] == "cpu"
    for workload in workloads(objects):
        assert not gpu_requests(workload), workload["metadata"]["name"]
        assert "nodeSelector" not in pod_spec(workload)
        assert "tolerations" not in pod_spec(workload)
    assert "nvidia.com/gpu" not in yaml.safe_dump_all(objects)
    assert "TAILOR_LLM_BASE_URL" not in config_data(objects)


# --- the renderer itself -----------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


FIXTURE_BASE = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations: [{key: a, operator: Exists}]
      containers:
        - name: main
          image: tailor:old
          env: [{name: A, value: "1"}, {name: B, value: "2"}, {name: GONE, value: "x"}]
          volumeMounts: [{name: x, mountPath: /x}]
          ports: [{name: http, containerPort: 8000}]
          resources: {limits: {cpu: "2", memory: 1Gi}}
        - name: side
          image: docker.io/library/busybox:1.36
      volumes: [{name: x, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"""

FIXTURE_PATCH = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      tolerations: [{key: b, operator: Exists}]
      nodeSelector: {disk: ssd, zone: null}
      containers:
        - name: extra
          image: tailor
        - name: main
          env: [{name: C, value: "3"}, {name: A, value: "9"}, {name: GONE, $patch: delete}]
          volumeMounts: [{name: y, mountPath: /x}, {name: z, mountPath: /z}]
          resources: {limits: {memory: null, nvidia.com/gpu: "1"}}
"""


@pytest.fixture
def fixture_overlay(tmp_path: Path) -> Path:
    write(tmp_path / "base" / "kustomization.yaml", "resources: [objects.yaml]\n")
    write(tmp_path / "base" / "objects.yaml", FIXTURE_BASE)
    write(
        tmp_path / "overlay" / "kustomization.yaml",
        """
resources: [../base]
namespace: demo
labels:
  - pairs: {tier: web}
    includeTemplates: true
  - pairs: {team: search}
    includeSelectors: true
images:
  - {name: tailor, newName: registry.example/tailor, newTag: "2.0"}
  - {name: docker.io/library/busybox, digest: "sha256:abc"}
patches:
  - path: patch.yaml
""",
    )
    write(tmp_path / "overlay" / "patch.yaml", FIXTURE_PATCH)
    return tmp_path / "overlay"


def test_the_renderer_implements_strategic_merge_images_labels_and_namespace(
    fixture_overlay: Path,
) -> None:
    objects = build(fixture_overlay)
    deployment = get(objects, "Deployment", "web")
    service = get(objects, "Service", "web")
    assert {o["metadata"]["namespace"] for o in objects} == {"demo"}
    spec = pod_spec(deployment)
    # Lists with a merge key merge by it, the patch's items first; other lists are replaced.
    assert [c["name"] for c in spec["containers"]] == ["extra", "main", "side"]
    main = container(deployment, "main")
    assert main["env"] == [
        {"name": "C", "value": "3"},
        {"name": "A", "value": "9"},
        {"name": "B", "value": "2"},
    ]
    assert main["volumeMounts"] == [
        {"name": "y", "mountPath": "/x"},
        {"name": "z", "mountPath": "/z"},
    ]
    assert main["ports"] == [{"name": "http", "containerPort": 8000}]
    assert main["resources"] == {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}
    assert spec["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert spec["nodeSelector"] == {"disk": "ssd"}
    assert spec["volumes"] == [{"name": "x", "emptyDir": {}}]
    # Images by name, whatever the tag; a digest replaces the tag.
    assert main["image"] == "registry.example/tailor:2.0"
    assert container(deployment, "extra")["image"] == "registry.example/tailor:2.0"
    assert container(deployment, "side")["image"] == "docker.io/library/busybox@sha256:abc"
    # Labels: metadata always, templates when asked, selectors only with includeSelectors.
    assert deployment["metadata"]["labels"] == {"app": "web", "tier": "web", "team": "search"}
    assert pod_labels(deployment) == {"app": "web", "tier": "web", "team": "search"}
    assert deployment["spec"]["selector"]["matchLabels"] == {"app": "web", "team": "search"}
    assert service["spec"]["selector"] == {"app": "web", "team": "search"}
    assert service["metadata"]["labels"] == {"tier": "web", "team": "search"}


@pytest.mark.parametrize(
    ("kustomization", "error"),
    [
        pytest.param(
            "resources: [../base]\nreplicas: [{name: web, count: 3}]\n",
            UnsupportedFeatureError,
            id="replicas",
        ),
        pytest.param(
            "resources: [../base]\nconfigMapGenerator: [{name: c, literals: [a=b]}]\n",
            UnsupportedFeatureError,
            id="configMapGenerator",
        ),
        pytest.param(
            "resources: [../base]\npatches: [{path: patch.yaml, target: {kind: Service}}]\n",
            UnsupportedFeatureError,
            id="patch-target",
        ),
        pytest.param("resources: [../base, missing.yaml]\n", KustomizeError, id="missing-resource"),
        pytest.param("resources: [../base, ../base]\n", KustomizeError, id="duplicate-objects"),
        pytest.param(
            "resources: [../base]\npatches:\n  - patch: |\n      apiVersion: v1\n"
            "      kind: Service\n      metadata: {name: nope}\n",
            KustomizeError,
            id="patch-without-target-object",
        ),
    ],
)
def test_the_renderer_refuses_what_it_does_not_implement_or_cannot_resolve(
    fixture_overlay: Path, kustomization: str, error: type[Exception]
) -> None:
    write(fixture_overlay / "kustomization.yaml", kustomization)
    with pytest.raises(error):
        build(fixture_overlay)


# --- agreement with a real kustomize, where one is installed -------------------------------------


def real_kustomize() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def render_with_real_kustomize(directory: Path) -> list[Obj]:
    command = real_kustomize()
    if command is None:
        pytest.skip("neither kustomize nor kubectl is installed")
    result = subprocess.run(
        [*command, str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_id(objects: list[Obj]) -> dict[tuple[str, str, str, str], Obj]:
    return {resource_id(o): o for o in objects}


@overlay_param
def test_a_real_kustomize_renders_the_same_overlay(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    theirs = render_with_real_kustomize(K8S_DIR / "overlays" / overlay)
    assert by_id(theirs) == by_id(rendered[overlay])


def test_a_real_kustomize_renders_the_same_fixture(fixture_overlay: Path) -> None:
    theirs = render_with_real_kustomize(fixture_overlay)
    assert by_id(theirs) == by_id(build(fixture_overlay))
