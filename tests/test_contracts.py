"""Issue 40 item 1: the documents steps hand each other are typed contracts. For each
(``steps.common.contracts``: variants.json, benchmark.json, the promotion, serve-check's
summary.json; and the served model's serving.json): a round trip, and a document that
lacks a field, carries one this version does not know, or has another ``schema_version``
refused in one line naming the file and the field (never a KeyError); through a step's
command line that is exit 2. That each reader imports its contract is
tests/test_layout.py's (``documents_read_through_their_contract``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steps.common.contracts import ContractError, VariantsManifest
from steps.common.serving.serving_manifest import ManifestError, ServingManifest
from tests.helpers.contract_samples import BENCHMARK, PROMOTION, SERVING, SUMMARY, VARIANTS

CONTRACTS = {  # each contract: a document of it, and fields whose absence is named so
    "variants.json": (VARIANTS, [("variants", "onnx", "status"), ("batch_range", "max"),
                                 ("variants", "aoti", "failure", "signal"), ("classes",)]),
    "benchmark.json": (BENCHMARK, [("variants", "eager", "accuracy"), ("promotion", "version"),
                                   ("variants", "aoti", "failure"), ("fastest_by_batch",),
                                   ("variants", "onnx", "batches", "64", "p50_ms")]),
    "promotion": (PROMOTION, [("served_by_batch",), ("decision", "challenger", "accuracy"),
                              ("previous_version",)]),
    "summary.json": (SUMMARY, [("by_concurrency", "1", "p50_ms"), ("expected_accuracy", "low"),
                               ("passed",)]),
}  # fmt: skip
MISSING = [(doc, path) for doc, (_, paths) in CONTRACTS.items() for path in paths]


def without(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    document = json.loads(json.dumps(document))
    node = document
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return document


@pytest.mark.parametrize("name", CONTRACTS)
def test_a_contract_round_trips(name: str) -> None:
    value, _ = CONTRACTS[name]
    text = value.dumps()
    assert type(value).parse(text) == value
    assert type(value).parse(text).dumps() == text
    assert json.loads(text)["schema_version"] == 1


@pytest.mark.parametrize(("name", "path"), MISSING, ids=[f"{d}:{'.'.join(p)}" for d, p in MISSING])
def test_a_document_lacking_a_field_is_refused_naming_file_and_field(name: str, path) -> None:
    value, _ = CONTRACTS[name]
    document = without(value.document(), path)
    where = f"s3://b/run/{name}"
    with pytest.raises(ContractError) as refused:
        type(value).parse(json.dumps(document), where)
    assert str(refused.value) == f"{where}: {'.'.join(path)}: missing"


@pytest.mark.parametrize(
    ("name", "path", "version"),
    [
        ("variants.json", (), 2),
        ("variants.json", (), None),
        ("benchmark.json", (), 0),
        ("benchmark.json", ("promotion",), 2),
        ("promotion", (), "1"),
        ("summary.json", (), 99),
    ],
    ids=["variants-2", "variants-none", "benchmark-0", "benchmark-its-promotion", "promotion-text",
         "summary-99"],
)  # fmt: skip
def test_an_unknown_version_is_refused_naming_file_and_field(name: str, path, version) -> None:
    value, _ = CONTRACTS[name]
    document = value.document()
    node = document
    for key in path:
        node = node[key]
    if version is None:
        del node["schema_version"]
        expected = "schema_version: missing (one from before its contract, or not one; re-run"
    else:
        node["schema_version"] = version
        expected = f"schema_version: {version!r} unknown, this version reads 1 (re-run steps."
    with pytest.raises(ContractError) as refused:
        type(value).parse(json.dumps(document), f"/r/{name}")
    field = ".".join((*path, expected))
    if not path and version is None:  # no version at all: maybe no such document
        field = f"not a {name} ({type(value).DESCRIPTION}): {field}"
    assert str(refused.value).startswith(f"/r/{name}: {field}"), refused.value


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d["variants"]["onnx"].update(tuned=True), "variants.onnx.tuned: a field this"),
        (lambda d: d["variants"]["onnx"].update(status="gone"), "variants.onnx.status: Input"),
        (lambda d: d["batch_range"].update(max="many"), "batch_range.max: Input should be a valid"),
        (lambda d: d.update(variants=[]), "variants: Input should be a valid dictionary"),
    ],
    ids=["unknown-field", "unknown-status", "wrong-type", "not-a-mapping"],
)
def test_a_field_that_does_not_fit_is_named(change, words: str) -> None:
    document = VARIANTS.document()
    change(document)
    with pytest.raises(ContractError, match=rf"^/o/variants\.json: {words}"):
        VariantsManifest.parse(json.dumps(document), "/o/variants.json")


@pytest.mark.parametrize("text", ["{", "[1, 2]"], ids=["not-json", "not-an-object"])
def test_what_is_not_a_document_is_refused(text: str) -> None:
    with pytest.raises(ContractError, match=r"^/o/variants\.json: not a variants\.json \(steps"):
        VariantsManifest.parse(text, "/o/variants.json")


# --- serving.json: the served model's, standard library only ------------------------------
def test_serving_json_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "serving.json"
    path.write_text(SERVING.to_json())
    assert ServingManifest.read(path) == SERVING


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.pop("fastest_by_batch"), "fastest_by_batch: missing"),
        (lambda d: d["variants"]["onnx"].pop("kind"), "variants.onnx.kind: missing"),
        (lambda d: d.pop("schema_version"), "schema_version: missing"),
        (lambda d: d.update(schema_version=2), "schema_version: 2 unknown, this version reads 1"),
        (lambda d: d.update(extra=1), "extra: a field this version does not know"),
        (lambda d: d.update(threads="2"), "threads: not a int"),
        (lambda d: d["batch_range"].pop("max"), "batch_range.max: missing"),
        (lambda d: d.update(runtime=None), "runtime: not a str"),
    ],
    ids=[
        "missing",
        "missing-nested",
        "no-version",
        "unknown-version",
        "unknown-field",
        "type",
        "batch-range",
        "runtime",
    ],
)
def test_serving_json_that_does_not_fit_is_refused(tmp_path: Path, change, words: str) -> None:
    document = json.loads(SERVING.to_json())
    change(document)
    path = tmp_path / "serving.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ManifestError) as refused:
        ServingManifest.read(path)
    assert str(refused.value).startswith(f"{path}: {words}"), refused.value


# --- through a step's command line: exit 2, one line --------------------------------------
@pytest.mark.parametrize(
    ("path", "field"),
    [(("promotion", "version"), "promotion.version: missing"),
     (("schema_version",), "not a benchmark.json (steps.benchmark's report): schema_version")],
    ids=["promotion-version", "schema-version"],
)  # fmt: skip
def test_serve_check_refuses_a_benchmark_json_that_does_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture, path, field: str
) -> None:
    from steps.serve_check import step as serve_check

    bad = tmp_path / "benchmark.json"
    bad.write_text(json.dumps(without(BENCHMARK.document(), path)))
    argv = ["--url", "http://127.0.0.1:9", "--dataset", (tmp_path / "none").as_uri()]
    code = serve_check.main([*argv, "--benchmark", str(bad), "--set", "tracking.enabled=false"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"serve_check: error: --benchmark {bad}: {field}"), err
    assert err.count("\n") == 1 and "Traceback" not in err
