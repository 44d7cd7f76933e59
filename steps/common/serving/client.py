"""A client of the serving endpoint (``python -m steps.serve``, or ``mlflow models serve``
of the champion): post uint8 images, get their classes. Standard library only, one
keep-alive connection per client, a timeout on every socket operation.

    client = ServingClient("http://127.0.0.1:8080", timeout_s=30)
    classes = client.classes(images)     # uint8 N x 32 x 32 x 3 -> [int] * N (/invocations)
    outputs = client.infer("cifar10-classifier", images)   # the Open Inference Protocol,
    outputs["class"], outputs["probabilities"]             # binary tensors both ways
    client.close()

``infer`` speaks the Open Inference Protocol (``POST /v2/models/<name>/infer``) with the
binary tensor data extension (triton-inference-server/server
``docs/protocol/extension_binary_data.md``): the images as raw bytes after a JSON header,
the outputs asked back as raw bytes (``binary=False``: JSON ``data`` both ways), so any
server of that protocol with such a model answers it (KServe's, Triton's; MLServer reads
JSON only).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

import numpy as np

OIP_INPUT = "images"
# The protocol's datatypes as numpy reads their little-endian bytes (BYTES apart).
OIP_DTYPES = {
    "BOOL": "?",
    "UINT8": "<u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "INT8": "<i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
}


class ServingError(RuntimeError):
    """The endpoint answered with an error or not at all; ``status`` 0 when it did not."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


def request_body(images: np.ndarray) -> bytes:
    """The JSON body MLflow's scoring protocol takes for a tensor: ``{"inputs": ...}``."""
    return json.dumps({"inputs": np.asarray(images).tolist()}).encode()


def oip_request(
    images: np.ndarray, binary: bool = True, outputs: Sequence[str] = ()
) -> tuple[bytes, dict[str, str]]:
    """An inference request for uint8 images and its headers: binary, the images' bytes
    after the JSON header and every output asked back as bytes; else all JSON."""
    images = np.ascontiguousarray(images, np.uint8)
    tensor: dict[str, Any] = {"name": OIP_INPUT, "datatype": "UINT8", "shape": list(images.shape)}
    if binary:
        tensor["parameters"] = {"binary_data_size": images.nbytes}
    else:
        tensor["data"] = images.ravel().tolist()
    request: dict[str, Any] = {"inputs": [tensor]}
    if binary:
        request["parameters"] = {"binary_data_output": True}
    if outputs:
        request["outputs"] = [{"name": n, "parameters": {"binary_data": binary}} for n in outputs]
    header = json.dumps(request, separators=(",", ":")).encode()
    if not binary:
        return header, {"Content-Type": "application/json"}
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return header + images.tobytes(), headers


def infer_path(model: str, version: str | None = None) -> str:
    """The Open Inference Protocol's inference route for ``model`` (and ``version``)."""
    return f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"


def oip_outputs(body: bytes, header_length: int | None) -> dict[str, np.ndarray]:
    """An inference response's outputs by name, each as an array of its shape."""
    head = body if header_length is None else body[:header_length]
    doc = json.loads(head)
    offset = len(head)
    outputs = {}
    for output in doc["outputs"]:
        shape, kind = output["shape"], output["datatype"]
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is None:
            data = output["data"]
            values = np.asarray(data, object if kind == "BYTES" else OIP_DTYPES[kind])
        else:
            raw = body[offset : offset + size]
            offset += size
            values = (
                _bytes_elements(raw) if kind == "BYTES" else np.frombuffer(raw, OIP_DTYPES[kind])
            )
        outputs[output["name"]] = values.reshape(shape)
    return outputs


def _bytes_elements(raw: bytes) -> np.ndarray:
    """BYTES in binary: a 4-byte little-endian length before each element."""
    items, at = [], 0
    while at < len(raw):
        size = int.from_bytes(raw[at : at + 4], "little")
        items.append(raw[at + 4 : at + 4 + size].decode())
        at += 4 + size
    return np.asarray(items, object)


def _error_message(data: bytes) -> str:
    """The one line of an error answer: MLflow's ``message`` or the protocol's ``error``."""
    try:
        doc = json.loads(data)
        return str(doc["message"] if "message" in doc else doc["error"])
    except (ValueError, KeyError, TypeError):
        return data[:200].decode(errors="replace")


class ServingClient:
    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r}: give the endpoint as http://HOST:PORT")
        self.url = url.rstrip("/")
        self.base = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        self._connection = kind(parts.hostname, parts.port, timeout=timeout_s)

    def post(self, body: bytes) -> bytes:
        """POST a ready JSON body to /invocations; the 200 answer's bytes, else ServingError."""
        status, data, _ = self._request("POST", "/invocations", body)
        if status != 200:
            raise ServingError(status, _error_message(data))
        return data

    def infer(
        self,
        model: str,
        images: np.ndarray,
        binary: bool = True,
        outputs: Sequence[str] = (),
        version: str | None = None,
    ) -> dict[str, np.ndarray]:
        """The Open Inference Protocol: ``POST /v2/models/<model>[/versions/<v>]/infer``
        of uint8 ``images``; each output by name (``class``, ``class_name``,
        ``probabilities``, or those named in ``outputs``)."""
        body, headers = oip_request(images, binary, outputs)
        return self.post_infer(infer_path(model, version), body, headers)

    def post_infer(self, path: str, body: bytes, headers: dict[str, str]) -> dict[str, np.ndarray]:
        """POST a ready Open Inference Protocol request (``oip_request``) to ``path``
        (``/v2/models/<model>[/versions/<v>]/infer``); its outputs by name."""
        status, data, answer = self._request("POST", path, body, headers)
        if status != 200:
            raise ServingError(status, _error_message(data))
        length = answer.get("inference-header-content-length")
        return oip_outputs(data, int(length) if length is not None else None)

    def server_extensions(self) -> list[str] | None:
        """The Open Inference Protocol extensions the server declares (``GET /v2``: server
        metadata, e.g. ``binary_tensor_data``); None from a server without the route
        (``mlflow models serve``) or an answer that is not the protocol's."""
        status, data, _ = self._request("GET", "/v2", None)
        if status != 200:
            return None
        try:
            return [str(name) for name in json.loads(data).get("extensions", [])]
        except (ValueError, AttributeError, TypeError):
            return None

    def predict(self, images: np.ndarray) -> list[dict[str, Any]]:
        """One row per image: ``class``, ``class_name``, ``probabilities``."""
        return json.loads(self.post(request_body(images)))["predictions"]

    def classes(self, images: np.ndarray) -> list[int]:
        return [int(row["class"]) for row in self.predict(images)]

    def served_versions(self, name: str) -> list[str] | None:
        """The registry versions ``GET /v2/models/<name>`` says are served (the Open
        Inference Protocol's model metadata, which ``python -m steps.serve`` answers);
        None from a server without that route (``mlflow models serve``); ServingError for
        an answer naming another model, or any other error."""
        status, data, _ = self._request("GET", f"/v2/models/{name}", None)
        try:
            doc = json.loads(data)
            if status == 200:
                return [str(v) for v in doc["versions"]]
            message = doc["error"]  # ours: "no model <name> here; this serves <other>"
        except (ValueError, KeyError, TypeError):
            if status == 404:
                return None
            message = data[:200].decode(errors="replace")
        raise ServingError(status, f"GET /v2/models/{name}: {message}")

    def status(self, path: str) -> int:
        """The HTTP status of ``GET path`` (a health probe); 0 when nothing answers."""
        try:
            return self._request("GET", path, None)[0]
        except ServingError:
            return 0

    def wait_ready(self, timeout_s: float, path: str = "/v2/health/ready") -> None:
        """Until ``path`` answers 200, at most ``timeout_s``; else ServingError."""
        deadline = time.monotonic() + timeout_s
        while (code := self.status(path)) != 200:
            if time.monotonic() > deadline:
                raise ServingError(code, f"{self.url}{path} not ready after {timeout_s:g} s")
            time.sleep(0.2)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> ServingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes, dict[str, str]]:
        """Status, body and (lower-cased) headers of the answer."""
        if headers is None:
            headers = {"Content-Type": "application/json"} if body is not None else {}
        for attempt in (1, 2):  # a kept-alive connection the server closed: once more, anew
            try:
                self._connection.request(method, self.base + path, body=body, headers=headers)
                response = self._connection.getresponse()
                data = response.read()
                return response.status, data, {k.lower(): v for k, v in response.getheaders()}
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._connection.close()
                if attempt == 2:
                    raise ServingError(0, f"{self.url}{path}: the connection was closed") from None
            except (OSError, http.client.HTTPException) as exc:
                self._connection.close()
                raise ServingError(0, f"{self.url}{path}: {exc or type(exc).__name__}") from None
        raise AssertionError("unreachable")


def predict_classes(url: str, images: np.ndarray, timeout_s: float = 30.0) -> list[int]:
    """The classes of ``images`` (uint8 N x 32 x 32 x 3) from the endpoint at ``url``."""
    with ServingClient(url, timeout_s) as client:
        return client.classes(images)
