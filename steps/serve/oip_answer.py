"""What the Open Inference Protocol's inference route writes back: the answer (outputs as
JSON ``data`` or as raw bytes after the JSON header, the binary tensor data extension's
``binary_data_size``), the model's metadata, the error object, and numpy's dtypes named as
the protocol names them (kserve/open-inference-protocol ``specification/protocol/
inference_rest.md``: ``$inference_response``, ``$metadata_model_response``, "Tensor Data
Types"; MLServer ``mlserver/codecs/numpy.py`` maps them the same way)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from steps.serve.outputs import Part

# numpy kind+size -> the protocol's datatype (inference_rest.md "Tensor Data Types").
DATATYPES = {
    "b1": "BOOL",
    "u1": "UINT8",
    "u2": "UINT16",
    "u4": "UINT32",
    "u8": "UINT64",
    "i1": "INT8",
    "i2": "INT16",
    "i4": "INT32",
    "i8": "INT64",
    "f2": "FP16",
    "f4": "FP32",
    "f8": "FP64",
}


class OipError(Exception):
    """A request this server refuses: ``status`` and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_body(message: str) -> bytes:
    """The protocol's error object (``$inference_error_response``)."""
    return json.dumps({"error": message}).encode()


def datatype(dtype: np.dtype) -> str:
    if dtype.kind in "OSU":
        return "BYTES"
    return DATATYPES.get(f"{dtype.kind}{dtype.itemsize}", dtype.name.upper())


@dataclass
class InferRequest:
    images: np.ndarray
    id: str | None
    outputs: list[tuple[str, bool]]  # (name, binary) as asked; empty: every output
    binary: bool  # binary_data_output: the default for outputs not named


def metadata(
    name: str,
    version: str | None,
    input_name: str,
    input_datatype: str,
    input_shape: list[int],
    outputs: dict[str, tuple[str, list[int]]],
) -> dict[str, Any]:
    """``$metadata_model_response``; ``outputs``: name -> (datatype, shape)."""
    return {
        "name": name,
        "versions": [version] if version else [],
        "platform": "mlflow_pyfunc",
        "inputs": [{"name": input_name, "datatype": input_datatype, "shape": input_shape}],
        "outputs": [
            {"name": output, "datatype": kind, "shape": shape}
            for output, (kind, shape) in outputs.items()
        ],
    }


def encode(
    model: str, version: str | None, part: Part, request: InferRequest
) -> tuple[bytes, int | None]:
    """The answer of ``model`` at ``version`` to ``request``: its bytes, and the JSON
    header's length where binary outputs follow it (``Inference-Header-Content-Length``),
    else None."""
    columns = part.columns()
    wanted = request.outputs or [(name, request.binary) for name in columns]
    outputs, chunks = [], []
    for name, binary in wanted:
        values = columns.get(name)
        if values is None:
            raise OipError(400, f"no output {name!r}; this model gives {', '.join(columns)}")
        entry: dict[str, Any] = {
            "name": name,
            "shape": list(values.shape),
            "datatype": datatype(values.dtype),
        }
        if binary:
            raw = _raw(values)
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = values.ravel().tolist()
        outputs.append(entry)
    answer: dict[str, Any] = {"model_name": model}
    if version:
        answer["model_version"] = version
    if request.id is not None:
        answer["id"] = request.id
    answer["outputs"] = outputs
    head = json.dumps(answer, separators=(",", ":")).encode()
    if not chunks:
        return head, None
    return head + b"".join(chunks), len(head)


def _raw(values: np.ndarray) -> bytes:
    """An output as the binary extension sends it: little-endian, row-major; BYTES as a
    4-byte length before each element."""
    if values.dtype.kind in "OSU":
        parts = []
        for item in values.ravel().tolist():
            data = item if isinstance(item, bytes) else str(item).encode()
            parts += [len(data).to_bytes(4, "little"), data]
        return b"".join(parts)
    return np.ascontiguousarray(values, values.dtype.newbyteorder("<")).tobytes()
