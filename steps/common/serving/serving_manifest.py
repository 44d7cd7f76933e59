"""``serving.json``: what the served model's folder holds, the contract between the
benchmark that registers the model (``steps.benchmark.registered_model`` writes it from
``variants.json`` and the fastest variants) and ``classifier.py``, which reads it when the
model loads.

Standard library only: the model ships this file in its ``code_paths`` beside
``classifier.py``, which imports it as ``serving_manifest`` where neither torch nor the ``steps``
package is installed (``mlflow models serve``). So it is a plain dataclass with a small
reader of its own rather than the pydantic contracts of ``steps.common.contracts``; it
reads as they do: every field present, the schema version it knows, and a document that
does not fit refused in one line naming the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


class ManifestError(ValueError):
    """serving.json does not fit its contract; the message names the file and the field."""


@dataclass(frozen=True)
class ServedVariant:
    """One variant the served model runs: how its runner loads it (``runners.load_runner``)."""

    kind: str
    file: str
    precision: str
    files: list[str]
    details: dict[str, Any]


@dataclass(frozen=True)
class ServedBatchRange:
    """The batch sizes the variants' programs take (torch.export, AOTInductor and TensorRT
    have a dynamic range; a larger request runs in chunks)."""

    min: int
    max: int


@dataclass(frozen=True)
class ServingManifest:
    """The classes, the normalisation, the runtimes' threads, the batch range, which image
    serves it (``runtime``: portable or torch), the variants and which one answers each
    batch size."""

    DOCUMENT = "serving.json"

    classes: list[str]
    mean: list[float]
    std: list[float]
    threads: int
    batch_range: ServedBatchRange
    runtime: str
    variants: dict[str, ServedVariant]
    fastest_by_batch: dict[int, str]
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        document = asdict(self)
        document["fastest_by_batch"] = {str(b): n for b, n in self.fastest_by_batch.items()}
        return json.dumps(document, indent=2)

    @classmethod
    def read(cls, path: Path) -> ServingManifest:
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise ManifestError(f"{path}: not valid JSON ({exc})") from None
        return cls.from_document(data, str(path))

    @classmethod
    def from_document(cls, data: Any, where: str) -> ServingManifest:
        """The manifest from its parsed JSON; ManifestError naming ``where`` and the field."""
        top = _fields_of(cls, data, where, "")
        if top["schema_version"] != SCHEMA_VERSION:
            raise ManifestError(
                f"{where}: schema_version: {top['schema_version']!r} unknown, this version "
                f"reads {SCHEMA_VERSION}"
            )
        variants = _typed(top["variants"], dict, where, "variants")
        fastest = _typed(top["fastest_by_batch"], dict, where, "fastest_by_batch")
        try:
            by_batch = {int(b): _typed(n, str, where, f"fastest_by_batch.{b}") for b, n in
                        fastest.items()}  # fmt: skip
        except ValueError:
            raise ManifestError(f"{where}: fastest_by_batch: a key is not a batch size") from None
        return cls(
            classes=[str(c) for c in _typed(top["classes"], list, where, "classes")],
            mean=[float(v) for v in _typed(top["mean"], list, where, "mean")],
            std=[float(v) for v in _typed(top["std"], list, where, "std")],
            threads=_typed(top["threads"], int, where, "threads"),
            batch_range=ServedBatchRange(
                **{
                    name: _typed(value, int, where, f"batch_range.{name}")
                    for name, value in _fields_of(
                        ServedBatchRange, top["batch_range"], where, "batch_range."
                    ).items()
                }
            ),
            runtime=_typed(top["runtime"], str, where, "runtime"),
            variants={
                name: ServedVariant(**_fields_of(ServedVariant, v, where, f"variants.{name}."))
                for name, v in variants.items()
            },
            fastest_by_batch=by_batch,
        )


def _fields_of(kind: type, data: Any, where: str, prefix: str) -> dict[str, Any]:
    """``data``'s value of each of ``kind``'s fields: every one there, no other."""
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: {prefix.rstrip('.') or '(the document)'}: not an object")
    names = [f.name for f in fields(kind)]
    for name in names:
        if name not in data:
            raise ManifestError(f"{where}: {prefix}{name}: missing")
    for name in data:
        if name not in names:
            raise ManifestError(f"{where}: {prefix}{name}: a field this version does not know")
    return {name: data[name] for name in names}


def _typed(value: Any, kind: type, where: str, field: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ManifestError(f"{where}: {field}: not a {kind.__name__} (got {value!r})"[:300])
    return value
