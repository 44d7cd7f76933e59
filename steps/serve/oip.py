"""The Open Inference Protocol's inference request and response, with the binary tensor data
extension: what KServe's clients, Triton's and MLServer's speak.

    POST /v2/models/<name>[/versions/<version>]/infer

A request (kserve/open-inference-protocol ``specification/protocol/inference_rest.md``,
``$inference_request``) holds one input, the served signature's tensor: ``name`` ``images``,
``datatype`` ``UINT8``, ``shape`` ``[N, 32, 32, 3]``, and its values either as JSON
(``data``: flat or nested, row-major) or as raw bytes after the JSON header (the binary
extension, triton-inference-server/server ``docs/protocol/extension_binary_data.md``: the
input's ``parameters.binary_data_size`` gives its byte count, the
``Inference-Header-Content-Length`` header the JSON header's). The answer names the model
and its registry version, returns the request's ``id``, and holds each output the model
gives (``class`` INT64 ``[N]``, ``class_name`` BYTES ``[N]``, ``probabilities`` FP32
``[N, 10]``), or those the request's ``outputs`` name, each as JSON ``data`` or, where that
output's ``parameters.binary_data`` (or the request's ``binary_data_output``) is true, as
raw little-endian bytes after the header. Datatypes are named as the protocol names them
(MLServer ``mlserver/codecs/numpy.py`` maps numpy's the same way).

Every refusal is ``OipError``: a status and one line, answered as ``{"error": "..."}``. The
checks run in the order that gives the truest message: the datatype, then the shape (a
flat list is told its shape, not a count), then the image count (413 past
``serving.max_request_images``), then the values.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import simdjson

from steps.serve import oip_answer as answer
from steps.serve.oip_answer import InferRequest, OipError, datatype, error_body
from steps.serve.outputs import Part

__all__ = ["INPUT_NAME", "InferRequest", "OipCodec", "OipError", "datatype", "error_body"]

INPUT_NAME = "images"
_SIMDJSON_ERRORS = (ValueError, TypeError, OverflowError, RuntimeError, KeyError)


class OipCodec:
    """Reads inference requests for a uint8 ``[-1, *image_shape]`` input and writes their
    answers, for the model ``name`` at registry ``version`` (None outside the registry)."""

    def __init__(
        self,
        name: str,
        version: str | None,
        dtype: np.dtype,
        image_shape: tuple[int, ...],
        max_images: int,
    ) -> None:
        self.name, self.version = name, version
        self.dtype = np.dtype(dtype)
        self.datatype = datatype(self.dtype)
        self.image_shape = tuple(image_shape)
        self.per_image = math.prod(self.image_shape)
        self.max_images = max_images
        self.outputs: list[str] = []  # the model's outputs, once a first batch named them
        self.expected = f"{INPUT_NAME!r}, {self.datatype} [N, {', '.join(map(str, image_shape))}]"

    def metadata(self, outputs: dict[str, tuple[str, list[int]]]) -> dict[str, Any]:
        """``$metadata_model_response``; ``outputs``: name -> (datatype, shape)."""
        shape = [-1, *self.image_shape]
        return answer.metadata(self.name, self.version, INPUT_NAME, self.datatype, shape, outputs)

    def encode(self, part: Part, request: InferRequest) -> tuple[bytes, int | None]:
        """The answer (steps.serve.oip_answer.encode)."""
        return answer.encode(self.name, self.version, part, request)

    def parse(self, body: bytes, header_length: int | None) -> InferRequest:
        """The request's images and what it asks back, or OipError."""
        header, binary = body, b""
        if header_length is not None:
            if not 0 < header_length <= len(body):
                raise OipError(
                    400,
                    f"Inference-Header-Content-Length {header_length} is not within the "
                    f"body's {len(body)} bytes",
                )
            header, binary = body[:header_length], body[header_length:]
        # A parser per request (a fraction of a microsecond): one reused would refuse every
        # later document while a proxy of this one lived on, say in a traceback.
        try:
            document = simdjson.Parser().parse(header)
        except _SIMDJSON_ERRORS as exc:
            raise OipError(400, f"the inference request is not JSON: {_line(exc)}") from None
        try:
            return self._read(document, binary)
        except _SIMDJSON_ERRORS as exc:  # a value simdjson cannot give (a 100-digit shape)
            raise OipError(400, f"the inference request could not be read: {_line(exc)}") from None

    def _read(self, document: Any, binary: bytes) -> InferRequest:
        if not isinstance(document, simdjson.Object):
            raise OipError(400, 'expected an inference request {"inputs": [...]}')
        request_id = document.get("id")
        if request_id is not None and not isinstance(request_id, str):
            raise OipError(400, f"'id' must be a string; got {_json(request_id)}")
        parameters = _parameters(document.get("parameters"), "the request's")
        inputs = document.get("inputs")
        if not isinstance(inputs, simdjson.Array) or len(inputs) != 1:
            got = len(inputs) if isinstance(inputs, simdjson.Array) else _kind(inputs)
            raise OipError(400, f"'inputs' must hold one input, {self.expected}; got {got}")
        images = self._input(inputs[0], binary)
        return InferRequest(
            images,
            request_id,
            self._requested(document.get("outputs")),
            _flag(parameters, "binary_data_output"),
        )

    def _input(self, tensor: Any, binary: bytes) -> np.ndarray:
        if not isinstance(tensor, simdjson.Object):
            raise OipError(400, f"an input is an object; got {_kind(tensor)}")
        name, kind = tensor.get("name"), tensor.get("datatype")
        if name != INPUT_NAME:
            raise OipError(400, f"no input {_json(name)}: this model's input is {self.expected}")
        if kind != self.datatype:
            raise OipError(400, f"input {INPUT_NAME!r} is {self.datatype}; got {_json(kind)}")
        shape = tensor.get("shape")
        dims = shape.as_list() if isinstance(shape, simdjson.Array) else None
        if (
            dims is None
            or len(dims) != 1 + len(self.image_shape)
            or any(type(d) is not int for d in dims)
            or tuple(dims[1:]) != self.image_shape
            or dims[0] < 1
        ):
            raise OipError(
                400,
                f"input {INPUT_NAME!r} must have shape {self._shape()}; got "
                f"{_json(dims if dims is not None else shape)}",
            )
        if dims[0] > self.max_images:
            raise OipError(
                413,
                f"{dims[0]} images in one request; at most {self.max_images} "
                "(serving.max_request_images): send them in several requests",
            )
        count = dims[0] * self.per_image
        size = _parameters(tensor.get("parameters"), "the input's").get("binary_data_size")
        if size is not None:
            return self._binary(size, count, binary, tuple(dims), tensor)
        if binary:
            raise OipError(
                400,
                f"{len(binary)} bytes after the JSON header, but no input has "
                "parameters.binary_data_size",
            )
        return self._json_data(tensor.get("data"), count, tuple(dims))

    def _binary(
        self, size: Any, count: int, binary: bytes, dims: tuple[int, ...], tensor: Any
    ) -> np.ndarray:
        want = count * self.dtype.itemsize
        if type(size) is not int or size != want:
            raise OipError(
                400,
                f"binary_data_size {_json(size)}: shape {list(dims)} of "
                f"{self.datatype} is {want} bytes",
            )
        if "data" in tensor:
            raise OipError(400, f"input {INPUT_NAME!r} has both 'data' and binary_data_size")
        if len(binary) != want:
            raise OipError(
                400,
                f"{len(binary)} bytes after the JSON header; binary_data_size "
                f"says {want} (check Inference-Header-Content-Length)",
            )
        return np.frombuffer(binary, self.dtype).reshape(dims)

    def _json_data(self, data: Any, count: int, dims: tuple[int, ...]) -> np.ndarray:
        if not isinstance(data, simdjson.Array):
            raise OipError(
                400, f"input {INPUT_NAME!r} needs 'data' (or binary_data_size); got {_kind(data)}"
            )
        try:
            flat = np.frombuffer(data.as_buffer(of_type="i"), np.int64)
        except _SIMDJSON_ERRORS:
            raise OipError(
                400,
                f"input {INPUT_NAME!r}: {self.datatype} data must be integers; "
                f"got {_first_other(data.as_list())}",
            ) from None
        if len(flat) != count:
            raise OipError(
                400,
                f"input {INPUT_NAME!r}: 'data' holds {len(flat)} values; shape "
                f"{list(dims)} needs {count}",
            )
        info = np.iinfo(self.dtype)
        low, high = int(flat.min()), int(flat.max())
        if low < info.min or high > info.max:
            raise OipError(
                400,
                f"input {INPUT_NAME!r}: values from {low} to {high}, outside "
                f"{info.min}..{info.max}",
            )
        return flat.astype(self.dtype).reshape(dims)

    def _requested(self, outputs: Any) -> list[tuple[str, bool]]:
        if outputs is None:
            return []
        if not isinstance(outputs, simdjson.Array):
            raise OipError(400, f"'outputs' must be a list; got {_kind(outputs)}")
        asked = []
        for item in outputs:
            name = item.get("name") if isinstance(item, simdjson.Object) else None
            if not isinstance(name, str):
                raise OipError(400, "each requested output needs a 'name'")
            if self.outputs and name not in self.outputs:
                raise OipError(
                    400, f"no output {name!r}; this model gives {', '.join(self.outputs)}"
                )
            parameters = _parameters(item.get("parameters"), f"output {name!r}'s")
            asked.append((name, _flag(parameters, "binary_data")))
        return asked

    def _shape(self) -> str:
        return f"[N, {', '.join(map(str, self.image_shape))}] (N >= 1)"


def _parameters(value: Any, whose: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, simdjson.Object):
        raise OipError(400, f"{whose} 'parameters' must be an object; got {_kind(value)}")
    return value.as_dict()


def _flag(parameters: dict[str, Any], key: str) -> bool:
    value = parameters.get(key, False)
    if not isinstance(value, bool):
        raise OipError(400, f"parameter {key} must be true or false; got {_json(value)}")
    return value


def _first_other(values: list[Any]) -> str:
    """The first value of nested ``values`` that is not an integer, as JSON."""
    stack = [values]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif type(item) is not int:
            return f"{_json(item)} ({_kind(item)})"
    return "an integer past 64 bits"


def _kind(value: Any) -> str:
    names = {type(None): "null", bool: "a boolean", str: "a string", float: "a number"}
    if isinstance(value, simdjson.Array):
        return "an array"
    if isinstance(value, simdjson.Object):
        return "an object"
    return names.get(type(value), type(value).__name__)


def _json(value: Any) -> str:
    if isinstance(value, (simdjson.Array, simdjson.Object)):
        value = value.as_list() if isinstance(value, simdjson.Array) else value.as_dict()
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
