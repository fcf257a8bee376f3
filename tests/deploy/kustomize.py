"""A small, dependency-free implementation of the part of `kustomize build` that k8s/ uses.

Supported kustomization fields: ``resources`` (files and directories, recursively),
``namespace``, ``labels`` (``pairs``, ``includeSelectors``, ``includeTemplates``),
``commonLabels``, ``images`` and ``patches`` whose entries name a strategic-merge patch file
(``path``) or carry one inline (``patch``), without ``target``. Anything else raises
:class:`UnsupportedFeatureError`, so a manifest change that needs more of kustomize fails the
tests loudly instead of rendering something a real ``kustomize build`` would not.

The transformer order is kustomize's: patches, namespace, labels, images; a base is built
completely (its own transformers included) before the overlay's transformers run over it.
Strategic merge follows the Kubernetes patch metadata for the fields these manifests use:
lists of containers, env, volumes, ports and so on merge by their patch merge key (note that
``volumeMounts`` merge by ``mountPath``), every other list is replaced, ``null`` deletes a
key, and the ``$patch: delete|replace`` directives are honoured. Merged lists come out the
way kustomize writes them: the patch's items first, in patch order, then the untouched rest.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")

SUPPORTED_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "metadata",
        "resources",
        "namespace",
        "labels",
        "commonLabels",
        "images",
        "patches",
    }
)

# Kinds that have no namespace; the namespace transformer leaves them alone.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "APIService",
        "CSIDriver",
        "CSINode",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "IngressClass",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "RuntimeClass",
        "StorageClass",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)

# Patch merge keys (x-kubernetes-patch-merge-key) by the name of the list field.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "resourceClaims": "name",
}

CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")

# (kind, slash-separated path): where label transformers write, from kustomize's field specs.
TEMPLATE_LABEL_PATHS: tuple[tuple[str, str], ...] = (
    ("ReplicationController", "spec/template/metadata/labels"),
    ("Deployment", "spec/template/metadata/labels"),
    ("ReplicaSet", "spec/template/metadata/labels"),
    ("DaemonSet", "spec/template/metadata/labels"),
    ("StatefulSet", "spec/template/metadata/labels"),
    ("Job", "spec/template/metadata/labels"),
    ("CronJob", "spec/jobTemplate/metadata/labels"),
    ("CronJob", "spec/jobTemplate/spec/template/metadata/labels"),
)
# (kind, path, create): selector fields that includeSelectors / commonLabels also write.
SELECTOR_LABEL_PATHS: tuple[tuple[str, str, bool], ...] = (
    ("Service", "spec/selector", True),
    ("ReplicationController", "spec/selector", True),
    ("Deployment", "spec/selector/matchLabels", True),
    ("ReplicaSet", "spec/selector/matchLabels", True),
    ("DaemonSet", "spec/selector/matchLabels", True),
    ("StatefulSet", "spec/selector/matchLabels", True),
    ("Job", "spec/selector/matchLabels", False),
    ("CronJob", "spec/jobTemplate/spec/selector/matchLabels", False),
    ("PodDisruptionBudget", "spec/selector/matchLabels", False),
    ("NetworkPolicy", "spec/podSelector/matchLabels", False),
)
# Pod-affinity and topology-spread selectors: rejected rather than half-implemented.
UNSUPPORTED_SELECTOR_FIELDS = ("affinity", "topologySpreadConstraints")


class UnsupportedFeatureError(ValueError):
    """The kustomization uses something this renderer does not implement."""


class KustomizeError(ValueError):
    """The kustomization is invalid in a way a real kustomize would also reject."""


def load_yaml_documents(path: Path) -> list[Obj]:
    """Every non-empty YAML document of a file, each of which must be a mapping."""
    docs: list[Obj] = []
    with path.open(encoding="utf-8") as fh:
        for doc in yaml.safe_load_all(fh):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise KustomizeError(f"{path}: a document is not a mapping")
            docs.append(doc)
    return docs


def find_kustomization(directory: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    raise KustomizeError(f"{directory}: no kustomization file")


def resource_id(obj: Obj) -> tuple[str, str, str, str]:
    """(apiVersion group, kind, namespace, name): what kustomize uses to tell objects apart."""
    api_version = str(obj.get("apiVersion", ""))
    group = api_version.split("/")[0] if "/" in api_version else ""
    metadata = obj.get("metadata") or {}
    return (group, str(obj.get("kind", "")), str(metadata.get("namespace", "")), metadata["name"])


def build(directory: Path) -> list[Obj]:
    """Render the kustomization in ``directory`` like ``kustomize build`` (order aside)."""
    directory = directory.resolve()
    kustomization = load_yaml_documents(find_kustomization(directory))
    if len(kustomization) != 1:
        raise KustomizeError(f"{directory}: the kustomization file must hold one document")
    kust = kustomization[0]
    unsupported = sorted(set(kust) - SUPPORTED_FIELDS)
    if unsupported:
        raise UnsupportedFeatureError(f"{directory}: unsupported fields {unsupported}")

    objects: list[Obj] = []
    for entry in kust.get("resources") or []:
        target = (directory / str(entry)).resolve()
        if target.is_dir():
            objects.extend(build(target))
        elif target.is_file():
            objects.extend(load_yaml_documents(target))
        else:
            raise KustomizeError(f"{directory}: resource {entry!r} not found")
    _check_unique(objects)

    for patch in _load_patches(directory, kust.get("patches") or []):
        apply_patch(objects, patch)
    if "namespace" in kust:
        set_namespace(objects, str(kust["namespace"]))
    if "commonLabels" in kust:
        add_labels(objects, _string_map(kust["commonLabels"]), selectors=True, templates=True)
    for label in kust.get("labels") or []:
        extra = sorted(set(label) - {"pairs", "includeSelectors", "includeTemplates"})
        if extra:
            raise UnsupportedFeatureError(f"{directory}: unsupported labels fields {extra}")
        selectors = bool(label.get("includeSelectors", False))
        templates = selectors or bool(label.get("includeTemplates", False))
        add_labels(objects, _string_map(label["pairs"]), selectors=selectors, templates=templates)
    for image in kust.get("images") or []:
        set_image(objects, image)
    _check_unique(objects)
    return objects


def _check_unique(objects: list[Obj]) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = resource_id(obj)
        if key in seen:
            raise KustomizeError(f"duplicate object {key}")
        seen.add(key)


def _string_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise KustomizeError(f"labels must map strings to strings, got {value!r}")
    return dict(value)


def _load_patches(directory: Path, entries: list[Any]) -> list[Obj]:
    patches: list[Obj] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise KustomizeError(f"{directory}: a patches entry must be a mapping")
        extra = sorted(set(entry) - {"path", "patch"})
        if len(set(entry) & {"path", "patch"}) != 1:
            raise KustomizeError(f"{directory}: a patches entry needs one of path, patch")
        if extra:
            raise UnsupportedFeatureError(f"{directory}: unsupported patches fields {extra}")
        if "path" in entry:
            docs = load_yaml_documents(directory / str(entry["path"]))
        else:
            docs = [d for d in yaml.safe_load_all(str(entry["patch"])) if d is not None]
        for doc in docs:
            if not isinstance(doc, dict) or "kind" not in doc or "metadata" not in doc:
                raise UnsupportedFeatureError(
                    f"{directory}: only strategic-merge patches with kind and metadata are "
                    "supported (no JSON 6902 patches, no target selectors)"
                )
            patches.append(doc)
    return patches


def apply_patch(objects: list[Obj], patch: Obj) -> None:
    """Strategic-merge ``patch`` into the one object it names (by kind, name, namespace)."""
    group, kind, namespace, name = resource_id(patch)

    def named(obj: Obj) -> bool:
        o_group, o_kind, o_namespace, o_name = resource_id(obj)
        same = (o_group, o_kind, o_name) == (group, kind, name)
        return same and (not namespace or o_namespace == namespace)

    matches = [i for i, obj in enumerate(objects) if named(obj)]
    if len(matches) != 1:
        raise KustomizeError(f"patch for {kind}/{name} matches {len(matches)} objects")
    index = matches[0]
    objects[index] = strategic_merge(objects[index], patch, ())


def _merge_key(path: tuple[str, ...], field: str) -> str | None:
    if field == "ports":
        # Container ports merge by containerPort; a Service's ports by port.
        return "containerPort" if path and path[-1] in CONTAINER_LISTS else "port"
    return MERGE_KEYS.get(field)


def strategic_merge(original: Obj, patch: Obj, path: tuple[str, ...]) -> Obj:
    """The result of strategic-merging ``patch`` into ``original`` (neither is modified)."""
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive is not None:
        raise UnsupportedFeatureError(f"$patch: {directive} on a mapping at {'/'.join(path)}")
    result = copy.deepcopy(original)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = strategic_merge(result[key], value, (*path, key))
        elif isinstance(value, list) and isinstance(result.get(key), list):
            merge_key = _merge_key(path, key)
            if merge_key is None:
                result[key] = [_strip_directives(v) for v in value]
            else:
                result[key] = _merge_list(result[key], value, merge_key, (*path, key))
        else:
            result[key] = _strip_directives(value)
    return result


def _strip_directives(value: Any) -> Any:
    """A patch value that has nothing to merge into, without directives or null values."""
    if isinstance(value, dict):
        return {
            k: _strip_directives(v) for k, v in value.items() if k != "$patch" and v is not None
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value if not _is_delete(v)]
    return copy.deepcopy(value)


def _is_delete(value: Any) -> bool:
    return isinstance(value, dict) and value.get("$patch") == "delete"


def _merge_list(
    original: list[Any], patch: list[Any], merge_key: str, path: tuple[str, ...]
) -> list[Any]:
    by_key: dict[Any, Obj] = {}
    for item in original:
        if not isinstance(item, dict) or merge_key not in item:
            raise KustomizeError(f"{'/'.join(path)}: an item has no {merge_key}")
        by_key[item[merge_key]] = item
    merged: list[Any] = []
    touched: set[Any] = set()
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise KustomizeError(f"{'/'.join(path)}: a patch item has no {merge_key}")
        key = item[merge_key]
        touched.add(key)
        if _is_delete(item):
            continue
        if key in by_key:
            merged.append(strategic_merge(by_key[key], item, path))
        else:
            merged.append(_strip_directives(item))
    merged.extend(copy.deepcopy(i) for i in original if i[merge_key] not in touched)
    return merged


def set_namespace(objects: list[Obj], namespace: str) -> None:
    for obj in objects:
        if obj.get("kind") not in CLUSTER_SCOPED_KINDS:
            obj.setdefault("metadata", {})["namespace"] = namespace


def _get_map(obj: Obj, path: str, create: bool) -> dict[str, Any] | None:
    node: Any = obj
    for part in path.split("/"):
        if not isinstance(node, dict):
            return None
        if part not in node or node[part] is None:
            if not create:
                return None
            node[part] = {}
        node = node[part]
    return node if isinstance(node, dict) else None


def add_labels(
    objects: list[Obj], labels: dict[str, str], *, selectors: bool, templates: bool
) -> None:
    for obj in objects:
        kind = obj.get("kind")
        targets: list[dict[str, Any] | None] = [_get_map(obj, "metadata/labels", True)]
        if templates:
            targets += [_get_map(obj, p, True) for k, p in TEMPLATE_LABEL_PATHS if k == kind]
        if selectors:
            pod_spec = (obj.get("spec") or {}).get("template", {}).get("spec", {})
            if any(field in pod_spec for field in UNSUPPORTED_SELECTOR_FIELDS):
                raise UnsupportedFeatureError(
                    f"{kind}: selector labels with affinity/topology spread constraints"
                )
            targets += [_get_map(obj, p, c) for k, p, c in SELECTOR_LABEL_PATHS if k == kind]
        for target in targets:
            if target is not None:
                target.update(labels)


def split_image(image: str) -> tuple[str, str, str]:
    """(name, ":tag" or "", "@digest" or "") of an image reference."""
    digest = ""
    if "@" in image:
        image, digest = image.split("@", 1)
        digest = "@" + digest
    tag = ""
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        image, tag = image.rsplit(":", 1)
        tag = ":" + tag
    return image, tag, digest


def _containers(node: Any) -> Iterator[Obj]:
    """Every container, init container and ephemeral container anywhere under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONTAINER_LISTS and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict))
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def set_image(objects: list[Obj], spec: Obj) -> None:
    extra = sorted(set(spec) - {"name", "newName", "newTag", "digest"})
    if extra:
        raise UnsupportedFeatureError(f"unsupported images fields {extra}")
    for obj in objects:
        for container in _containers(obj):
            image = container.get("image")
            if not isinstance(image, str):
                continue
            name, tag, digest = split_image(image)
            if name != spec["name"]:
                continue
            new_name = str(spec.get("newName", name))
            if "digest" in spec:
                suffix = "@" + str(spec["digest"])
            elif "newTag" in spec:
                suffix = ":" + str(spec["newTag"])
            else:
                suffix = tag + digest
            container["image"] = new_name + suffix
