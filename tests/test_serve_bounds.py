"""The server's streaming bounds on a request body (steps/serve/bounds.py), fed in chunks:
real requests pass in any chunking; each hostile body is refused at the chunk that passes a
bound; a string split at an escape stays a string; the parse alone refuses them as 400s."""

from __future__ import annotations

import json
import random

import pytest

from steps.serve.bounds import BodyRefused, JsonBounds, Limits
from tests.helpers.hostile_bodies import EMPTY_ARRAYS, VALID
from tests.helpers.serving_helpers import CIFAR, predictors

LIMITS = Limits.for_images((32, 32, 3), 1024)


def fed(body: bytes, chunk: int, limits: Limits = LIMITS) -> int:
    """Feed ``body`` in chunks of ``chunk`` bytes; the bytes read when it was refused
    (BodyRefused re-raised with that count as ``read``), else len(body)."""
    bounds = JsonBounds(limits)
    read = 0
    try:
        for start in range(0, len(body), chunk):
            part = body[start : start + chunk]
            read += len(part)
            bounds.feed(part)
        bounds.finish()
    except BodyRefused as exc:
        exc.read = read  # type: ignore[attr-defined]
        raise
    return read


@pytest.mark.parametrize("name", list(VALID))
def test_real_requests_pass_in_any_chunking(name: str) -> None:
    body = VALID[name]
    rng = random.Random(name)
    for chunk in (1, 2, 3, 7, 4096, 65536, len(body)):
        if chunk < 64 and len(body) > 200_000:
            continue
        assert fed(body, chunk) == len(body)
    bounds, at = JsonBounds(LIMITS), 0  # uneven chunks, as a socket delivers them
    while at < len(body):
        step = rng.randint(1, 9000)
        bounds.feed(body[at : at + step])
        at += step
    bounds.finish()
    assert bounds.depth == 0


@pytest.mark.parametrize(
    ("body", "status", "message", "most_read"),
    [
        (b"[" * 100_000 + b"]" * 100_000, 400, r"^JSON nested more than 32 deep", 65536),
        (b'{"inputs": [' + b"7" * 5000 + b"]}", 400, r"^a number of more than 64 digits", 65536),
        (
            b'{"inputs": [' + b"1" * 40 + b"0" * 40 + b"]}",
            400,
            r"^a number of more than 64 digits",
            100,
        ),
        (EMPTY_ARRAYS, 413, r"^more than 1086464 arrays or objects", 3_400_000),
        (
            b'{"inputs": [' + b",".join([b"[]"] * 500_000) + b"]}",
            400,
            r"^500002 arrays or objects for at most 500000 values",
            2_000_000,
        ),
        (
            b'{"inputs": [' + b",".join([b"[0]"] * 600_000) + b"]}",
            400,
            r"arrays or objects for at most 600000 values: not images",
            3_000_000,
        ),
    ],
    ids=["deep", "huge-integer", "digits-across-chunks", "empty-arrays", "fewer-empty", "ones"],
)
def test_each_hostile_body_is_refused_at_the_chunk_that_passes_a_bound(
    body: bytes, status: int, message: str, most_read: int
) -> None:
    chunk = 65536 if len(body) > 1000 else 7
    with pytest.raises(BodyRefused, match=message) as err:
        fed(body, chunk)
    assert err.value.status == status
    assert err.value.read <= most_read, err.value.read  # type: ignore[attr-defined]


def test_a_string_split_across_chunks_at_an_escape_is_still_a_string() -> None:
    body = b'{"k": "ab\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "inputs": [1]}'
    for cut in range(1, len(body)):
        bounds = JsonBounds(Limits(depth=3, digits=64, containers=10, elements=99, per_value=9))
        bounds.feed(body[:cut])
        bounds.feed(body[cut:])
        bounds.finish()
        assert (bounds.depth, bounds.containers, bounds.in_string) == (0, 2, False), cut


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            json.dumps({"inputs": [[[[1, True, 3]] + [[0, 0, 0]] * 31] * 32]}).encode(),
            r"booleans among the numbers \(true/false are not pixel values\)$",
        ),
        (
            json.dumps({"inputs": [0] * 3072}).encode(),
            r"got shape \(3072,\)$",
        ),
        (
            b"[" * 50_000 + b"]" * 50_000,
            r"^the body is not JSON this server reads: nested too deep$",
        ),
        (
            b'{"inputs": [' + b"9" * 5000 + b"]}",
            r"^the body could not be read: ValueError: Exceeds the limit \(4300 digits\)",
        ),
    ],
    ids=["boolean", "flat-3072", "deep", "huge-integer"],
)
def test_the_parse_refuses_them_as_400s_even_without_the_bounds(body: bytes, message: str) -> None:
    """``Predictor.parse`` alone (both paths): a 400 MlflowException, one line."""
    from mlflow.exceptions import MlflowException

    for predictor in predictors(CIFAR, max_images=8):
        with pytest.raises(MlflowException, match=message) as err:
            predictor.parse(body)
        assert err.value.get_http_status_code() == 400
        assert "\n" not in err.value.message
