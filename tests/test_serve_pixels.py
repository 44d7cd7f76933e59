"""``steps.serve.pixels``: the fast read of a request body never disagrees with the standard
path (``json.loads`` and MLflow's conversion, made strict by ``strict_input`` as the
champion installs it). Each body goes through a ``Predictor`` with the fast path and one
without it; both must give the same array, or the same exception with the same message."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from steps.common.serving.client import request_body
from steps.serve.pixels import PixelParser
from steps.serve.predictor import Predictor
from tests.helpers.serving_helpers import CIFAR, predictors

SMALL = (-1, 2, 2, 3)


def outcome(predictor: Predictor, body: bytes) -> tuple[str, object]:
    try:
        images = predictor.parse(body)
    except Exception as exc:  # the comparison is of whatever either path raises
        return type(exc).__name__, str(exc)
    return "array", (images.dtype.str, images.shape, images.tobytes())


def images(n: int, shape: tuple[int, ...] = CIFAR, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *shape[1:]), dtype=np.uint8)


def nested(n: int, value: object = 7) -> list:
    """``n`` CIFAR-shaped images of ``value`` as nested lists."""
    return [[[[value] * 3] * 32] * 32] * n


BODIES = {
    # Taken by the fast path.
    "one image, json.dumps": request_body(images(1)),
    "three images, compact": json.dumps(
        {"inputs": images(3).tolist()}, separators=(",", ":")
    ).encode(),
    "pretty-printed": json.dumps({"instances": images(2).tolist()}, indent=2).encode(),
    "tabs and CRLF": b'\t{\r\n"inputs" :\t'
    + json.dumps(images(1).tolist()).replace(", ", ",\r\n\t").encode()
    + b"\r\n}\n",
    "0 and 255": json.dumps({"inputs": [[[[0, 255, 9]] * 32] * 32]}).encode(),
    # Taken by the standard path, which decides.
    "two numbers parted by a space": json.dumps({"inputs": nested(1)})
    .replace("7, 7, 7]", "7, 7 7]", 1)
    .encode(),
    "a leading zero": json.dumps({"inputs": nested(1)}).replace("7", "07", 1).encode(),
    "256": json.dumps({"inputs": nested(1)}).replace("7", "256", 1).encode(),
    "1000": json.dumps({"inputs": nested(1)}).replace("7", "1000", 1).encode(),
    "past int64": json.dumps({"inputs": nested(1)}).replace("7", "9" * 20, 1).encode(),
    "a negative pixel": json.dumps({"inputs": nested(1)}).replace("7", "-7", 1).encode(),
    "integer-valued floats": json.dumps({"inputs": nested(1, 7.0)}).encode(),
    "a fraction": json.dumps({"inputs": nested(1)}).replace("7", "0.5", 1).encode(),
    "an exponent": json.dumps({"inputs": nested(1)}).replace("7", "7e0", 1).encode(),
    "ragged": json.dumps({"inputs": nested(1)}).replace("7, 7, 7]", "7, 7]", 1).encode(),
    "four channels": json.dumps({"inputs": [[[[1, 2, 3, 4]] * 32] * 32]}).encode(),
    "no batch dimension": json.dumps({"inputs": [[[1, 2, 3]] * 32] * 32}).encode(),
    "an empty batch": b'{"inputs": []}',
    "a missing value": json.dumps({"inputs": nested(1)}).replace("7, 7", "7, ", 1).encode(),
    "a doubled comma": json.dumps({"inputs": nested(1)}).replace(", ", ",, ", 1).encode(),
    "a trailing comma": json.dumps({"inputs": nested(1)}).replace("7]", "7,]", 1).encode(),
    "a missing bracket": json.dumps({"inputs": nested(1)})[:-2].encode() + b"}",
    "an extra bracket": json.dumps({"inputs": nested(1)}).replace("[7", "[[7", 1).encode(),
    "two keys": json.dumps({"inputs": nested(1), "instances": nested(1)}).encode(),
    "another key": json.dumps({"data": nested(1)}).encode(),
    "an escaped key": b'{"\\u0069nputs": ' + json.dumps(nested(1)).encode() + b"}",
    "null": json.dumps({"inputs": nested(1)}).replace("7", "null", 1).encode(),
    "a string": json.dumps({"inputs": nested(1)}).replace("7", '"7"', 1).encode(),
    "truncated": request_body(images(1))[:-7],
    "not JSON": b"inputs=1,2,3",
    "more images than the limit": request_body(images(9)),
    "trailing garbage": request_body(images(1)) + b" x",
}


@pytest.mark.parametrize("name", list(BODIES))
def test_fast_and_standard_paths_agree(name: str) -> None:
    fast, standard = predictors(CIFAR)
    body = BODIES[name]
    assert outcome(fast, body) == outcome(standard, body)


@pytest.mark.parametrize(
    "name",
    [
        "one image, json.dumps",
        "three images, compact",
        "pretty-printed",
        "tabs and CRLF",
        "0 and 255",
    ],
)
def test_the_usual_bodies_take_the_fast_path(name: str) -> None:
    parsed = PixelParser(CIFAR).parse(BODIES[name])
    assert parsed is not None
    assert np.array_equal(parsed, np.asarray(next(iter(json.loads(BODIES[name]).values()))))


@pytest.mark.parametrize(
    "name", [n for n in BODIES if n not in {"one image, json.dumps", "three images, compact",
                                            "pretty-printed", "tabs and CRLF", "0 and 255",
                                            "more images than the limit"}],
)  # fmt: skip
def test_anything_else_is_left_to_the_standard_path(name: str) -> None:
    assert PixelParser(CIFAR).parse(BODIES[name]) is None


@pytest.mark.parametrize("shape", [SMALL, (-1, 3), (-1,)])
def test_mutated_bodies_agree(shape: tuple[int, ...]) -> None:
    """Random edits of valid small bodies, with the bytes JSON arrays are made of: whatever
    the fast path takes, the standard path reads the same; the rest both refuse alike.
    Flat shapes too: there the last number sits right before the array's one "]"."""
    fast, standard = predictors(shape)
    rng = random.Random(22)
    alphabet = b"0123456789[], \n7-.e"
    taken = refused = 0
    for trial in range(3000):
        body = bytearray(request_body(images(rng.randint(1, 3), shape, seed=trial)))
        if rng.random() < 0.5:
            body = bytearray(body.replace(b", ", b","))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(10, len(body) - 1)
            edit = rng.choice(("replace", "insert", "delete"))
            if edit == "replace":
                body[at] = rng.choice(alphabet)
            elif edit == "insert":
                body.insert(at, rng.choice(alphabet))
            else:
                del body[at]
        got = outcome(fast, bytes(body))
        assert got == outcome(standard, bytes(body)), bytes(body)
        taken += got[0] == "array" and fast.pixels.parse(bytes(body)) is not None
        refused += got[0] != "array"
    # Both kinds were met: the comparison was not of refusals only.
    assert taken > 300 and refused > 300, (taken, refused)


def test_a_refused_body_leaves_the_fast_path_working() -> None:
    """simdjson's parser refuses a new document while anything of the last one lives: a
    body it refused (a leading zero passes the outline, not simdjson) must not leave the
    next valid body to the slow path."""
    parser = PixelParser(CIFAR)
    for name in ("a leading zero", "past int64", "two numbers parted by a space"):
        assert parser.parse(BODIES[name]) is None
        assert parser.parse(BODIES["one image, json.dumps"]) is not None, name


def test_threads_each_read_their_own_bodies() -> None:
    """One parser on several threads (the tests' and a server's callers) reads each body
    as its own."""
    parser = PixelParser(CIFAR)
    bodies = [request_body(images(1 + i % 3, seed=i)) for i in range(60)]
    with ThreadPoolExecutor(4) as pool:
        parsed = list(pool.map(parser.parse, bodies * 3))
    for body, got in zip(bodies * 3, parsed, strict=True):
        assert np.array_equal(got, np.asarray(json.loads(body)["inputs"], dtype=np.uint8))
