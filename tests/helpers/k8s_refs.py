"""What a Kubernetes object names of others: its key (kind, namespace, name), the objects
embedded in it (a Workflow's resource templates' manifests, a job's pod templates), and
the references it makes (Secrets, ConfigMaps, accounts, PVCs, a runtime, a queue), each
optional or not; walked over any document."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import yaml

from tests.helpers.cluster_build import CLUSTER_SCOPED, VOLCANO_QUEUE_ANNOTATION


class Ref(NamedTuple):
    kind: str
    namespace: str | None
    name: str
    optional: bool = False

    @property
    def key(self) -> tuple[str, str | None, str]:
        return (self.kind, self.namespace, self.name)


def key_of(obj: dict[str, Any]) -> tuple[str, str | None, str]:
    meta = obj["metadata"]
    namespace = None if obj["kind"] in CLUSTER_SCOPED else meta.get("namespace")
    return (obj["kind"], namespace, meta["name"])


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every mapping inside ``node``, itself first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def _manifest(text: str) -> dict[str, Any]:
    # a WorkflowTemplate's job manifest holds {{...}} where a run's parameters go
    return yaml.safe_load(re.sub(r"\{\{[^}]*\}\}", "0", text))


def template_manifest(template: dict[str, Any]) -> dict[str, Any] | None:
    """The object a resource template acts on (inline or manifestFrom; None: flags only)."""
    resource = template.get("resource") or {}
    if "manifest" in resource:
        return _manifest(resource["manifest"])
    wanted = (resource.get("manifestFrom") or {}).get("artifact", {}).get("name")
    for artifact in template.get("inputs", {}).get("artifacts", []):
        if artifact["name"] == wanted:
            return _manifest(artifact["raw"]["data"])
    return None


def embedded(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The objects a Workflow's resource templates create or apply."""
    for template in doc.get("spec", {}).get("templates", []):
        found = template_manifest(template)
        if found is not None:
            yield found


def references(doc: dict[str, Any], namespace: str | None = None) -> set[Ref]:
    """Every Secret, ConfigMap, ServiceAccount, PVC, Queue, PriorityClass and training
    runtime that ``doc`` (and any object its resource templates create) names."""
    ns = doc.get("metadata", {}).get("namespace") or namespace
    refs: set[Ref] = set()
    for node in walk({k: v for k, v in doc.items() if k != "metadata"}):
        for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
            if isinstance(node.get(key), dict):
                refs.add(Ref(kind, ns, node[key]["name"], bool(node[key].get("optional"))))
        for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
            if isinstance(node.get(key), dict) and "name" in node[key]:
                refs.add(Ref(kind, ns, node[key]["name"], bool(node[key].get("optional"))))
        for key, value in node.items():  # Argo's artifact credentials: accessKeySecret...
            if key.endswith("Secret") and isinstance(value, dict) and {"name", "key"} <= set(value):
                refs.add(Ref("Secret", ns, value["name"], bool(value.get("optional"))))
        if isinstance(node.get("secret"), dict) and "secretName" in node["secret"]:
            refs.add(Ref("Secret", ns, node["secret"]["secretName"]))
        if isinstance(node.get("configMap"), dict) and "name" in node["configMap"]:
            refs.add(Ref("ConfigMap", ns, node["configMap"]["name"]))  # volume, memo cache
        if isinstance(node.get("persistentVolumeClaim"), dict):
            refs.add(Ref("PersistentVolumeClaim", ns, node["persistentVolumeClaim"]["claimName"]))
        if isinstance(node.get("serviceAccountName"), str):
            refs.add(Ref("ServiceAccount", ns, node["serviceAccountName"]))
        if isinstance(node.get("priorityClassName"), str):
            refs.add(Ref("PriorityClass", None, node["priorityClassName"]))
        if isinstance(node.get("schedulingPolicy"), dict):  # a PyTorchJob's runPolicy
            policy = node["schedulingPolicy"]
            if policy.get("queue"):
                refs.add(Ref("Queue", None, policy["queue"]))
            if policy.get("priorityClass"):
                refs.add(Ref("PriorityClass", None, policy["priorityClass"]))
        if isinstance(node.get("runtimeRef"), dict):  # a TrainJob's runtime
            runtime = node["runtimeRef"]
            kind = runtime.get("kind", "ClusterTrainingRuntime")
            refs.add(Ref(kind, None if kind in CLUSTER_SCOPED else ns, runtime["name"]))
    queue = (doc.get("metadata", {}).get("annotations") or {}).get(VOLCANO_QUEUE_ANNOTATION)
    if queue:
        refs.add(Ref("Queue", None, queue))
    if doc.get("kind") == "ConfigMap" and "artifactRepository" in (doc.get("data") or {}):
        refs |= references({"spec": yaml.safe_load(doc["data"]["artifactRepository"])}, ns)
    for child in embedded(doc):
        refs |= references(child, ns)
    return refs
