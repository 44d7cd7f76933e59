"""What a finished pod gives back: its output parameters read from the files its template
declares (``valueFrom.path``) or from the resource's JSON (``valueFrom.jsonPath``), their
``valueFrom.default`` when absent, its output artifacts copied into the run directory
(Argo's executor ``SaveParameters`` / ``SaveArtifacts``), and the stdout that becomes
``outputs.result`` (``CaptureScriptResult``)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.local.errors import UnsupportedFeature
from flows.local.pods.output_paths import missing_output

RESULT_BYTES = 256 * 1024  # Argo keeps the last 256 kB of a result


def json_path(document: Mapping[str, Any], path: str) -> str:
    """A kubectl-style ``{.a.b}`` path (the subset Argo's resource outputs use). A field
    name ends at ``.`` only, so ``-`` and ``/`` belong to it, as in an annotation's key
    (client-go util/jsonpath/parser.go ``isTerminator``)."""
    match = re.fullmatch(r"\{?\.?([\w./-]*)\}?", path.strip())
    if not match:
        raise UnsupportedFeature(f"jsonPath {path!r}")
    node: Any = document
    for part in filter(None, match.group(1).split(".")):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node if isinstance(node, str) else json.dumps(node)


def read_outputs(
    template: Mapping[str, Any],
    path_map: Mapping[str, Path],
    document: Mapping[str, Any] | None,
    artifact_dir: Path,
) -> dict[str, str]:
    """Output parameters from the files (or the resource JSON) the template declares;
    output artifacts copied to the run directory. ``path_map``: each declared path -> where
    the task's process wrote it."""
    values: dict[str, str] = {}
    outputs = template.get("outputs", {})
    for parameter in outputs.get("parameters", []):
        source, name = parameter.get("valueFrom", {}), parameter["name"]
        local = path_map.get(source["path"], Path(source["path"])) if "path" in source else None
        try:
            if local is not None:
                text = local.read_text()
                values[name] = text[:-1] if text.endswith("\n") else text
            elif "jsonPath" in source and document is not None:
                values[name] = json_path(document, source["jsonPath"])
        except (OSError, KeyError):
            if "default" in source:
                values[name] = str(source["default"])
            elif local is not None:
                what = f"output parameter {name}"
                raise FileNotFoundError(missing_output(what, source["path"], local)) from None
            else:
                raise FileNotFoundError(f"output parameter {name}: {source}") from None
    for artifact in outputs.get("artifacts", []):
        path = path_map.get(artifact["path"], Path(artifact["path"]))
        if path.exists():
            artifact_dir.mkdir(parents=True, exist_ok=True)
            target = artifact_dir / path.name
            (shutil.copytree if path.is_dir() else shutil.copyfile)(path, target)
        elif not artifact.get("optional"):
            what = f"output artifact {artifact['name']}"
            raise FileNotFoundError(missing_output(what, artifact["path"], path))
    return values


def small_files(directory: Path) -> dict[str, str]:
    """One-line text files of a directory (a step's output files), by name."""
    values: dict[str, str] = {}
    if directory.is_dir():
        for path in sorted(directory.iterdir()):
            if path.is_file() and path.stat().st_size <= 200:
                text = path.read_text(errors="replace").strip()
                if "\n" not in text:
                    values[path.name] = text
    return values


def read_result(stdout: Path) -> str | None:
    """A process's stdout as Argo's ``outputs.result``: one trailing newline trimmed, the
    last 256 kB kept; None when nothing was captured."""
    try:
        data = stdout.read_bytes()
    except FileNotFoundError:
        return None
    if data.endswith(b"\n"):
        data = data[:-1]
    return data[-RESULT_BYTES:].decode(errors="replace")
