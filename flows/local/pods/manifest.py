"""A resource template's manifest, as the pods that run it and the up-front checks read
it: its text (inline, or the raw input artifact ``manifestFrom`` names), whether it applies
a KServe InferenceService (a process that outlives its node) or deletes one by name, and
the ``metadata.name`` the API server would give a ``generateName``."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import yaml

INFERENCESERVICE_API = "serving.kserve.io/v1beta1"
INFERENCESERVICE_RESOURCE = "inferenceservices.serving.kserve.io"  # kubectl's name of it
IGNORED_DELETE_FLAGS = ("--ignore-not-found", "--ignore-not-found=true", "--wait=false")
_KIND = re.compile(r"""["']?kind["']?\s*:\s*["']?InferenceService\b""")


def manifest_of(template: Mapping[str, Any]) -> str:
    """The resource's manifest text: inline, or the raw input artifact ``manifestFrom``
    names ("" when neither)."""
    resource = template.get("resource", {})
    if "manifest" in resource:
        return str(resource["manifest"])
    name = resource.get("manifestFrom", {}).get("artifact", {}).get("name")
    for artifact in template.get("inputs", {}).get("artifacts", []):
        if artifact.get("name") == name and "raw" in artifact:
            return str(artifact["raw"].get("data", ""))
    return ""


def names_inferenceservice(text: str) -> bool:
    """Whether a manifest's text (YAML or JSON, maybe with ``{{...}}`` tags) is an
    InferenceService of KServe's v1beta1 API."""
    return bool(_KIND.search(text)) and INFERENCESERVICE_API in text


def serves(template: Mapping[str, Any]) -> bool:
    """An ``action: apply`` of an InferenceService: a process that outlives its node."""
    resource = template.get("resource", {})
    return resource.get("action") == "apply" and names_inferenceservice(manifest_of(template))


def service_delete_name(resource: Mapping[str, Any]) -> str | None:
    """The InferenceService a delete names (by flags or by manifest), else None."""
    flags = [f for f in resource.get("flags", []) if f not in IGNORED_DELETE_FLAGS]
    if len(flags) == 2 and flags[0] == INFERENCESERVICE_RESOURCE and "manifest" not in resource:
        return None if str(flags[1]).startswith("-") else str(flags[1])  # --all: no name
    text = str(resource.get("manifest", ""))
    if not flags and names_inferenceservice(text):
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
        name = document.get("metadata", {}).get("name") if isinstance(document, dict) else None
        return str(name) if name else None
    return None


def named(job: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``job`` with the ``metadata.name`` the API server would give its ``generateName``."""
    metadata = job.setdefault("metadata", {})
    if "name" not in metadata:
        suffix = f"{int(time.time()) % 100000:05d}"
        metadata["name"] = metadata.get("generateName", prefix) + suffix
    return job
