"""The Open Inference Protocol's inference route: the codec on its own (requests written as
the protocol's documents write them, every refusal a status and one line), then
``python -m steps.serve`` answering it for real beside ``/invocations``, with binary and
JSON tensors, through the same batcher.

References: kserve/open-inference-protocol ``specification/protocol/inference_rest.md``
(``$inference_request``, ``$inference_response``, the error object), triton-inference-server/
server ``docs/protocol/extension_binary_data.md`` (``binary_data_size``, ``binary_data``,
``binary_data_output``, ``Inference-Header-Content-Length``: its example's layout is
``test_the_binary_extensions_example_layout``)."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from steps.common.serving.client import (
    ServingClient,
    ServingError,
    oip_outputs,
    oip_request,
    request_body,
)
from steps.serve.oip import InferRequest, OipCodec, OipError
from steps.serve.outputs import BatchOutput, encode
from tests.helpers.serving_helpers import NAME, Running, serving

SHAPE = (32, 32, 3)


def codec(max_images: int = 8) -> OipCodec:
    codec = OipCodec("m", "3", np.dtype(np.uint8), SHAPE, max_images)
    codec.outputs = ["class", "class_name", "probabilities"]
    return codec


def pixels(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *SHAPE), dtype=np.uint8)


def header(**tensor: object) -> dict:
    base = {"name": "images", "datatype": "UINT8", "shape": [1, *SHAPE]}
    return {"inputs": [{**base, **tensor}]}


def test_json_data_flat_or_nested_reads_the_same_images() -> None:
    sent = pixels(2)
    flat = json.dumps(header(shape=[2, *SHAPE], data=sent.ravel().tolist())).encode()
    nested = json.dumps(header(shape=[2, *SHAPE], data=sent.tolist())).encode()
    for body in (flat, nested):
        request = codec().parse(body, None)
        assert request.images.dtype == np.uint8
        np.testing.assert_array_equal(request.images, sent)


def test_binary_data_after_the_header_reads_the_same_images() -> None:
    sent = pixels(3)
    body, headers = oip_request(sent)
    request = codec().parse(body, int(headers["Inference-Header-Content-Length"]))
    np.testing.assert_array_equal(request.images, sent)
    assert request.binary and request.outputs == []


def test_the_binary_extensions_example_layout() -> None:
    """Triton's example: the JSON object, then each input's bytes in order, its length in
    Inference-Header-Content-Length, the body's in Content-Length; ``binary_data`` on an
    output asks for it as bytes."""
    sent = pixels(1)
    head = json.dumps(
        {
            **header(parameters={"binary_data_size": 3072}),
            "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}],
        },
        indent=2,
    ).encode()
    request = codec().parse(head + sent.tobytes(), len(head))
    np.testing.assert_array_equal(request.images, sent)
    assert request.outputs == [("probabilities", True)]


def frame(n: int) -> BatchOutput:
    probabilities = np.random.default_rng(1).random((n, 10)).astype(np.float32)
    return BatchOutput(
        pd.DataFrame(
            {
                "class": probabilities.argmax(1).astype(np.int64),
                "class_name": [f"c{i}" for i in probabilities.argmax(1)],
                "probabilities": list(probabilities),
            }
        )
    )


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_the_answer_holds_each_output_typed_and_shaped(binary: bool) -> None:
    batch = frame(5)
    request = InferRequest(pixels(2), "42", [], binary)
    body, length = codec().encode(batch[1:3], request)
    assert (length is not None) == binary
    head = json.loads(body if length is None else body[:length])
    assert head["model_name"] == "m" and head["model_version"] == "3" and head["id"] == "42"
    assert [(o["name"], o["datatype"], o["shape"]) for o in head["outputs"]] == [
        ("class", "INT64", [2]),
        ("class_name", "BYTES", [2]),
        ("probabilities", "FP32", [2, 10]),
    ]
    outputs = oip_outputs(body, length)
    columns = batch.columns()
    np.testing.assert_array_equal(outputs["class"], columns["class"][1:3])
    np.testing.assert_array_equal(outputs["probabilities"], columns["probabilities"][1:3])
    assert list(outputs["class_name"]) == list(columns["class_name"][1:3])
    if binary:  # BYTES as the extension writes them: a 4-byte length, then the bytes
        assert body.endswith(columns["probabilities"][1:3].astype("<f4").tobytes())
        assert b"\x02\x00\x00\x00c" in body


def test_columns_answer_as_the_dataframe_made_of_them() -> None:
    """BatchOutput.of_columns (what the champion's predict_columns gives): every request's
    answer the same bytes as from the DataFrame predict builds of the same arrays, in both
    protocols; columns of unequal length are refused, naming their lengths."""
    framed = frame(5)
    columns = framed.columns()
    arrays = BatchOutput.of_columns(
        {**columns, "class_name": np.asarray(list(columns["class_name"]), dtype=object)}
    )
    assert len(arrays) == 5
    for part in (slice(0, 1), slice(1, 3), slice(3, 5)):
        assert encode(arrays[part]) == encode(framed[part])
        for binary in (False, True):
            request = InferRequest(pixels(part.stop - part.start), "7", [], binary)
            assert codec().encode(arrays[part], request) == codec().encode(framed[part], request)
    with pytest.raises(TypeError, match=r"columns of \{'class': 5, 'probabilities': 4\} rows"):
        BatchOutput.of_columns(
            {"class": columns["class"], "probabilities": columns["probabilities"][:4]}
        )


def test_only_the_outputs_asked_for_each_as_asked() -> None:
    request = InferRequest(pixels(1), None, [("probabilities", True), ("class", False)], False)
    body, length = codec().encode(frame(1)[0:1], request)
    head = json.loads(body[:length])
    assert [o["name"] for o in head["outputs"]] == ["probabilities", "class"]
    assert head["outputs"][0]["parameters"] == {"binary_data_size": 40}
    assert "data" in head["outputs"][1] and "id" not in head
    assert len(body) == length + 40


BAD = {
    "not-json": (b"{", None, 400, r"^the inference request is not JSON: "),
    "a-list": (b"[1]", None, 400, r'^expected an inference request \{"inputs": \[\.\.\.\]\}$'),
    "two-inputs": (
        json.dumps({"inputs": header()["inputs"] * 2}).encode(),
        None,
        400,
        r"^'inputs' must hold one input, 'images', UINT8 \[N, 32, 32, 3\]; got 2$",
    ),
    "other-name": (
        json.dumps(header(name="input0", data=[0] * 3072)).encode(),
        None,
        400,
        r'^no input "input0": this model\'s input is \'images\', UINT8',
    ),
    "fp32": (
        json.dumps(header(datatype="FP32", data=[0.5] * 3072)).encode(),
        None,
        400,
        r'^input \'images\' is UINT8; got "FP32"$',
    ),
    "nchw": (
        json.dumps(header(shape=[1, 3, 32, 32], data=[0] * 3072)).encode(),
        None,
        400,
        r"must have shape \[N, 32, 32, 3\] \(N >= 1\); got \[1, 3, 32, 32\]$",
    ),
    "flat-shape": (  # told its shape, not that it holds 3,072 images
        json.dumps(header(shape=[3072], data=[0] * 3072)).encode(),
        None,
        400,
        r"must have shape .*; got \[3072\]$",
    ),
    "boolean-shape": (
        json.dumps(header(shape=[True, 32, 32, 3], data=[0] * 3072)).encode(),
        None,
        400,
        r"must have shape .*; got \[true, 32, 32, 3\]$",
    ),
    "too-many": (
        json.dumps(header(shape=[9, *SHAPE], data=[0] * 3072)).encode(),
        None,
        413,
        r"^9 images in one request; at most 8 \(serving.max_request_images\)",
    ),
    "short-data": (
        json.dumps(header(data=[0] * 3071)).encode(),
        None,
        400,
        r"'data' holds 3071 values; shape \[1, 32, 32, 3\] needs 3072$",
    ),
    "over-255": (
        json.dumps(header(data=[256] + [0] * 3071)).encode(),
        None,
        400,
        r"values from 0 to 256, outside 0\.\.255$",
    ),
    "floats": (
        json.dumps(header(data=[0.5] + [0] * 3071)).encode(),
        None,
        400,
        r"UINT8 data must be integers; got 0\.5 \(a number\)$",
    ),
    "booleans": (
        json.dumps(header(data=[1, True] + [0] * 3070)).encode(),
        None,
        400,
        r"UINT8 data must be integers; got true \(a boolean\)$",
    ),
    "no-data": (json.dumps(header()).encode(), None, 400, r"needs 'data' .*; got null$"),
    "size-off": (
        json.dumps(header(parameters={"binary_data_size": 3000})).encode() + bytes(3000),
        len(json.dumps(header(parameters={"binary_data_size": 3000}))),
        400,
        r"^binary_data_size 3000: shape \[1, 32, 32, 3\] of UINT8 is 3072 bytes$",
    ),
    "bytes-short": (
        json.dumps(header(parameters={"binary_data_size": 3072})).encode() + bytes(3000),
        len(json.dumps(header(parameters={"binary_data_size": 3072}))),
        400,
        r"^3000 bytes after the JSON header; binary_data_size says 3072",
    ),
    "header-past-body": (b"{}", 10, 400, r"^Inference-Header-Content-Length 10 is not within"),
    "bytes-without-size": (
        json.dumps(header(data=[0] * 3072)).encode() + b"xx",
        len(json.dumps(header(data=[0] * 3072))),
        400,
        r"^2 bytes after the JSON header, but no input has parameters\.binary_data_size$",
    ),
    "unknown-output": (
        json.dumps({**header(data=[0] * 3072), "outputs": [{"name": "logits"}]}).encode(),
        None,
        400,
        r"^no output 'logits'; this model gives class, class_name, probabilities$",
    ),
    "binary-flag-not-bool": (
        json.dumps({**header(data=[0] * 3072), "parameters": {"binary_data_output": 1}}).encode(),
        None,
        400,
        r"^parameter binary_data_output must be true or false; got 1$",
    ),
    "huge-shape": (
        b'{"inputs":[{"name":"images","datatype":"UINT8","shape":[' + b"9" * 30 + b",32,32,3]}]}",
        None,
        400,
        r"^the inference request is not JSON: BIGINT_ERROR: Big integer",
    ),
}


@pytest.mark.parametrize(("body", "length", "status", "message"), BAD.values(), ids=list(BAD))
def test_each_refusal_is_a_status_and_one_line(
    body: bytes, length: int | None, status: int, message: str
) -> None:
    with pytest.raises(OipError) as err:
        codec().parse(body, length)
    assert err.value.status == status
    assert re.search(message, str(err.value)) and "\n" not in str(err.value), str(err.value)


# --- the server -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oip(champion: dict) -> Iterator[Running]:
    with serving(champion, "serving.max_request_images=16") as running:
        yield running
        running.stop()


def post(url: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict, bytes]:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request("POST", path, body, headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_binary_and_json_answer_as_invocations_does(oip: Running, images: np.ndarray) -> None:
    with ServingClient(oip.url) as client:
        rows = client.predict(images[:4])
        binary = client.infer(NAME, images[:4])
        as_json = client.infer(NAME, images[:4], binary=False)
    assert binary["class"].tolist() == as_json["class"].tolist() == [r["class"] for r in rows]
    assert list(binary["class_name"]) == [r["class_name"] for r in rows]
    want = np.array([r["probabilities"] for r in rows], np.float32)
    np.testing.assert_array_equal(binary["probabilities"], want)
    np.testing.assert_array_equal(as_json["probabilities"], want)


def test_the_binary_answer_is_the_extensions_layout(oip: Running, images: np.ndarray) -> None:
    body, headers = oip_request(images[:2], outputs=["probabilities"])
    status, answer_headers, answer = post(oip.url, f"/v2/models/{NAME}/infer", body, headers)
    assert status == 200, answer
    assert answer_headers["content-type"] == "application/octet-stream"
    length = int(answer_headers["inference-header-content-length"])
    head = json.loads(answer[:length])
    assert head["outputs"] == [
        {
            "name": "probabilities",
            "shape": [2, 10],
            "datatype": "FP32",
            "parameters": {"binary_data_size": 80},
        }
    ]
    assert head["model_name"] == NAME and len(answer) == length + 80


def test_the_version_in_the_path_must_be_the_one_served(
    oip: Running,
    champion: dict,
    images: np.ndarray,
) -> None:
    import mlflow

    version = mlflow.MlflowClient(champion["uri"]).get_model_version_by_alias(NAME, "champion")
    with ServingClient(oip.url) as client:
        assert client.infer(NAME, images[:1], version=version.version)["class"].shape == (1,)
        with pytest.raises(ServingError, match=rf"^HTTP 404: no version 999 of {NAME} here; "):
            client.infer(NAME, images[:1], version="999")
        with pytest.raises(ServingError, match=r"^HTTP 404: no model other here; this serves"):
            client.infer("other", images[:1])


@pytest.mark.parametrize(
    ("body", "headers", "status", "message"),
    [
        (b"{", {}, 400, r"^the inference request is not JSON"),
        (
            json.dumps(header(shape=[17, *SHAPE], data=[0])).encode(),
            {},
            413,
            r"^17 images in one request; at most 16",
        ),
        (b"{}", {"Inference-Header-Content-Length": "x"}, 400, r"'x' is not a byte count$"),
        (b"[" * 5000 + b"]" * 5000, {}, 400, r"^the inference request is not JSON: DEPTH_ERROR"),
        (b"[" * 50000 + b"]" * 50000, {}, 400, r"^JSON nested more than 32 deep"),
    ],
    ids=["not-json", "too-many", "bad-header-length", "deep", "deep-and-long"],
)
def test_errors_are_the_protocols_error_object(
    oip: Running, body: bytes, headers: dict, status: int, message: str
) -> None:
    got, _, answer = post(oip.url, f"/v2/models/{NAME}/infer", body, headers)
    assert got == status, answer
    doc = json.loads(answer)
    assert list(doc) == ["error"] and re.search(message, doc["error"]), doc


def test_metadata_names_the_input_and_outputs(oip: Running) -> None:
    with ServingClient(oip.url) as client:
        status, data, _ = client._request("GET", f"/v2/models/{NAME}", None)
        assert status == 200
        meta = json.loads(data)
        assert meta["inputs"] == [{"name": "images", "datatype": "UINT8", "shape": [-1, 32, 32, 3]}]
        assert meta["outputs"] == [
            {"name": "class", "datatype": "INT64", "shape": [-1]},
            {"name": "class_name", "datatype": "BYTES", "shape": [-1]},
            {"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
        ]
        status, data, _ = client._request("GET", f"/v2/models/{NAME}/ready", None)
        assert (status, json.loads(data)) == (200, {"name": NAME, "ready": True})
        status, data, _ = client._request("GET", "/v2", None)
        assert "binary_tensor_data" in json.loads(data)["extensions"]
        status, data, _ = client._request("GET", f"/v2/models/{NAME}/infer", None)
        assert status == 405 and "use POST" in json.loads(data)["error"]


def test_both_protocols_share_the_batcher(oip: Running, images: np.ndarray) -> None:
    """Binary, JSON and /invocations requests at once: each gets its own rows."""
    with ServingClient(oip.url) as client:
        alone = [r["class"] for r in client.predict(images[:12])]
        alone += [r["class"] for r in client.predict(images[12:24])]

    def one(index: int) -> list[int]:
        chunk = images[index * 3 : index * 3 + 3]
        with ServingClient(oip.url) as client:
            if index % 3 == 0:
                return [r["class"] for r in client.predict(chunk)]
            return client.infer(NAME, chunk, binary=index % 3 == 1)["class"].tolist()

    for _ in range(3):
        with ThreadPoolExecutor(8) as pool:
            together = [c for part in pool.map(one, range(8)) for c in part]
        assert len(together) == 24
        # INT8 at another batch size may flip a near tie; most classes must agree.
        assert sum(a == b for a, b in zip(together, alone, strict=True)) >= 22


def test_the_printed_curl_line_answers(oip: Running) -> None:
    (line,) = [x for x in oip.lines if x.startswith("or, Open Inference Protocol: ")]
    command = line.removeprefix("or, Open Inference Protocol: ")
    output = subprocess.run(["bash", "-c", command], capture_output=True, timeout=60, check=True)
    answer = json.loads(output.stdout)
    assert answer["model_name"] == NAME
    assert {o["name"] for o in answer["outputs"]} == {"class", "class_name", "probabilities"}


def test_invocations_body_through_the_client_still_works(oip: Running, images) -> None:
    """The shared client's MLflow route is unchanged by the protocol's (serve-check's)."""
    with ServingClient(oip.url) as client:
        rows = json.loads(client.post(request_body(images[:1])))["predictions"]
    assert len(rows) == 1 and set(rows[0]) == {"class", "class_name", "probabilities"}
