"""The served pyfunc, as MLflow's scoring server reads and answers it, minus pandas parsing.

``mlflow models serve`` turns ``{"inputs": ...}`` into the signature's tensor with
``mlflow.utils.proto_json_utils.convert_data_type`` (which the champion's
``strict_input.install`` replaced with its exact check for its own spec when the model
loaded), runs ``PyFuncModel.predict`` and writes ``{"predictions": ...}`` with
``_get_jsonable_obj(..., pandas_orient="records")`` and ``NumpyEncoder``
(mlflow 3.x ``mlflow/pyfunc/scoring_server/__init__.py``: ``parse_tf_serving_input``,
``invocations``, ``predictions_to_json``). This module calls those same functions, so a
request is refused with the same one-line message and answered with the same bytes; what
it adds is a complete check of the shape and dtype before a request may join a batch, the
limit on images per request, a fast read of the usual body (``steps.serve.pixels``:
integer pixels, parsed with numpy; anything else takes MLflow's path), and a call of the
champion's arrays (``predict_columns``) without the DataFrame ``predict`` wraps them in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import BAD_REQUEST
from mlflow.types import TensorSpec
from mlflow.utils import proto_json_utils

from steps.serve.bounds import JsonBounds, Limits
from steps.serve.outputs import BatchOutput
from steps.serve.pixels import PixelParser

INPUT_KEYS = ("inputs", "instances")  # the TF-serving keys MLflow takes for a tensor
# A JSON pixel takes at most "255, " (5 bytes), "255.0, " (7) or, pretty-printed, a line
# with its indent: 16 bytes a value bounds the body a request of N images may have.
BYTES_PER_VALUE = 16


class RequestTooLarge(Exception):
    """More images than ``serving.max_request_images`` (HTTP 413)."""


def bad_request(message: str) -> MlflowException:
    return MlflowException(message, error_code=BAD_REQUEST)


class Predictor:
    """A loaded pyfunc with one tensor input (the champion: uint8 ``N x 32 x 32 x 3``)."""

    def __init__(self, model: Any, max_request_images: int) -> None:
        schema = model.metadata.get_input_schema()
        specs = schema.inputs if schema is not None else []
        if len(specs) != 1 or not isinstance(specs[0], TensorSpec):
            raise ValueError(
                "the served model must have a signature with one tensor input "
                f"(the champion pyfunc has uint8 (-1, 32, 32, 3)); got {schema}"
            )
        self.model = model
        self.columns = columns_call(model)
        self.spec: TensorSpec = specs[0]
        self.dtype = np.dtype(self.spec.type)
        self.shape = tuple(self.spec.shape)
        self.max_images = max_request_images
        per_image = math.prod(abs(d) for d in self.shape[1:])
        self.max_body = max_request_images * per_image * BYTES_PER_VALUE + 65536
        # uint8 pixels as integers, read without building Python lists (the common body).
        self.pixels = PixelParser(self.shape) if self.dtype == np.uint8 else None
        self.limits = Limits.for_images(tuple(abs(d) for d in self.shape[1:]), max_request_images)

    def bounds(self) -> JsonBounds:
        """A fresh check of one JSON body's structure while it arrives (steps.serve.bounds)."""
        return JsonBounds(self.limits)

    def parse(self, body: bytes) -> np.ndarray:
        """The request's images, exactly as the signature says, or an MlflowException (400)
        naming what was expected; RequestTooLarge past the image limit, before any array
        is built."""
        images = self.pixels.parse(body) if self.pixels is not None else None
        if images is not None:
            self.check_count(len(images))
            return images
        try:
            return self._standard(body)
        except (MlflowException, RequestTooLarge):
            raise
        except RecursionError:  # json.loads recurses per level; bounds.py stops most first
            raise bad_request("the body is not JSON this server reads: nested too deep") from None
        except Exception as exc:  # any other failure to read a body is the body's: a 400
            line = (str(exc).strip().splitlines() or [""])[0][:200]
            raise bad_request(f"the body could not be read: {type(exc).__name__}: {line}") from None

    def _standard(self, body: bytes) -> np.ndarray:
        """MLflow's read: ``json.loads`` and its conversion (``strict_input``'s check)."""
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise bad_request(f"the body is not JSON: {exc}") from None
        keys = [k for k in INPUT_KEYS if isinstance(doc, dict) and k in doc]
        if not isinstance(doc, dict) or len(keys) != 1 or len(doc) != 1:
            got = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
            raise bad_request(f'expected a JSON object {{"inputs": [images]}}; got {got}')
        data = doc[keys[0]]
        if isinstance(data, list) and _nesting(data) == len(self.shape):
            # Its first axis counts images; nested otherwise (a flat list of 3,072
            # numbers), the shape's message below is the true one, not the count's.
            self.check_count(len(data))
        # MLflow's own conversion, which the champion's strict_input check replaces.
        images = np.asarray(proto_json_utils.convert_data_type(data, self.spec))
        if (
            images.dtype != self.dtype
            or images.ndim != len(self.shape)
            or any(
                want not in (-1, got) for want, got in zip(self.shape, images.shape, strict=False)
            )
            or len(images) == 0
        ):
            raise MlflowException.invalid_parameter_value(
                f"expected {self.dtype} of shape {self.shape}; got {images.dtype} of shape "
                f"{images.shape}"
            )
        return images

    def check_count(self, images: int) -> None:
        if images > self.max_images:
            raise RequestTooLarge(
                f"{images} images in one request; at most {self.max_images} "
                "(serving.max_request_images): send them in several requests"
            )

    def __call__(self, images: np.ndarray) -> BatchOutput:
        """The batch's output, answered per request in either protocol (steps.serve.outputs):
        the python model's ``predict_columns`` where it has one (the champion's), else
        ``PyFuncModel.predict``. The first skips what ``parse`` already did (MLflow's
        schema check) and the DataFrame the arrays would be put in and taken out of again:
        on one image, the most of what a request cost beyond the model (benchmarks/
        serving.py: 2.2 ms -> 1.6 ms at concurrency 1, on two AMD EPYC cores)."""
        if self.columns is not None:
            return BatchOutput.of_columns(self.columns(images))
        return BatchOutput(self.model.predict(images))


def columns_call(model: Any) -> Callable[[np.ndarray], dict[str, np.ndarray]] | None:
    """The pyfunc's python model's ``predict_columns`` (steps/common/serving/classifier.py),
    or None: a model of another flavour, or a champion registered before it had one."""
    unwrap = getattr(model, "unwrap_python_model", None)
    if unwrap is None:
        return None
    try:
        python_model = unwrap()
    except MlflowException:  # not a PythonModel pyfunc
        return None
    found = getattr(python_model, "predict_columns", None)
    return found if callable(found) else None


def _nesting(data: Any) -> int:
    """How deep ``data`` nests, following first elements (``[[[[0,...]]]]`` -> 4)."""
    depth = 0
    while isinstance(data, list):
        depth += 1
        data = data[0] if data else None
    return depth


def error_body(exc: MlflowException) -> tuple[int, bytes]:
    """Status and body as MLflow's scoring server answers an MlflowException
    (``serialize_as_json``: error_code, message, and the error_class and sqlstate MLflow
    3 adds); every message raised on the way here is one line."""
    return exc.get_http_status_code(), exc.serialize_as_json().encode()
