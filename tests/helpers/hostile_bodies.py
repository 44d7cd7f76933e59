"""Request bodies for the server's bounds (steps/serve/bounds.py): real requests of every
shape a client sends (``VALID``), and bodies of empty arrays past the arrays-or-objects
bound; read by tests/test_serve_bounds.py and tests/test_serve_hostile.py."""

from __future__ import annotations

import json

import numpy as np

from steps.common.serving.client import oip_request, request_body


def pixels(n: int) -> np.ndarray:
    return np.random.default_rng(n).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)


VALID = {
    "one image": request_body(pixels(1)),
    "pretty, floats": json.dumps({"inputs": pixels(2).astype(float).tolist()}, indent=1).encode(),
    "oip json": oip_request(pixels(3), binary=False)[0],
    "strings with brackets": json.dumps(
        {"inputs": pixels(1).tolist(), "x": ['[[[{"\\', "]]]]", "\\\\", '"[']}
    ).encode(),
    "1024 images": request_body(np.zeros((1024, 32, 32, 3), np.uint8)),
}
EMPTY_ARRAYS = b'{"inputs": [' + b",".join([b"[]"] * 3_000_000) + b"]}"  # 9 MB
# 30 MB, under the default byte limit (1,024 images, 50 MB): json.loads took seconds on it.
MORE_EMPTY_ARRAYS = b'{"inputs": [' + b",".join([b"[]"] * 10_000_000) + b"]}"
