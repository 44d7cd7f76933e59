"""What each memoized step's key holds (flows/pipeline/memo_keys.py), as Argo evaluates it on a
cluster: a change re-runs exactly the steps whose outputs it decides, and what a hit hands
on is the earlier run's outputs (tests/helpers/memo_sim.py runs two Workflows over one cache).

Argo v4.0.5 takes a cache key of ``[a-zA-Z0-9][-a-zA-Z0-9]*``
(workflow/controller/cache/cache.go ``cacheKeyRegex``), stored as a ConfigMap data key
(at most 253 characters: Kubernetes' IsConfigMapKey); its entry is the node's outputs
(configmap_cache.go ``Entry``: nodeID, outputs, two timestamps) and a ConfigMap holds at
most 1 MiB in all (docs/memoization.md FAQ), so an entry stays small.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from flows.pipeline import memo_keys
from flows.pipeline.memo_keys import STEPS, key_of, source_identity, split_key
from steps.common.config import load_config
from tests.helpers.faulty_builders import extra
from tests.helpers.memo_sim import simulate
from tests.helpers.paths import REPO_ROOT

CLUSTER = REPO_ROOT / "configs" / "cluster.yaml"
ALL = {"stage", "train", "optimize", "benchmark"}
AFTER_TRAIN = {"train", "optimize", "benchmark"}
DIGEST = "sha256:" + "ab" * 32
ARGO_KEY = re.compile(r"[a-zA-Z0-9][-a-zA-Z0-9]*")  # cache.go cacheKeyRegex


@pytest.mark.parametrize(
    ("overrides", "values", "rerun"),
    [
        pytest.param(
            ["optimize.opt_batch=32"], {}, {"optimize", "benchmark"}, id="optimize-setting"
        ),
        pytest.param(["train.label_smoothing=0.1"], {}, AFTER_TRAIN, id="train-setting"),
        pytest.param(["images.tag=0.2.0"], {}, ALL, id="image-tag"),
        pytest.param(
            [f"images.digests={{optimize: {DIGEST}}}"], {}, {"optimize", "benchmark"}, id="digest"
        ),
        pytest.param(["data.source=synthetic:400"], {}, ALL, id="data-source"),
        pytest.param([], {"epochs": "2"}, AFTER_TRAIN, id="p-epochs"),
        pytest.param([], {"data-source": "synthetic:400"}, ALL, id="p-data-source"),
        # configs/cluster.yaml trains on 2 nodes (train-multinode): on 1, template train
        pytest.param([], {"nodes": "1"}, AFTER_TRAIN, id="p-nodes-one"),
        pytest.param([], {"nodes": "2"}, set(), id="p-nodes-as-configured"),
        pytest.param(["benchmark.rounds=2"], {}, {"benchmark"}, id="benchmark-setting"),
        pytest.param(["storage.root_uri=s3://other"], {}, ALL, id="where-objects-live"),
        pytest.param(["tracking.uri=http://mlflow.other:5000"], {}, AFTER_TRAIN, id="mlflow"),
        # the staged content is the same: staging runs, training reuses its earlier model
        pytest.param(["data.md5=none"], {}, {"stage"}, id="md5-checked-or-not"),
        # what decides no output: everything reused
        pytest.param(["data.download_retries=1"], {}, set(), id="download-retries"),
        pytest.param(["train.checkpoint_every=2"], {}, set(), id="checkpoints"),
        pytest.param(["train.launcher=trainjob"], {}, set(), id="launcher"),
        pytest.param(["cluster.step_cpu=2"], {}, set(), id="pod-cpu"),
        pytest.param([f"images.digests={{serve: {DIGEST}}}"], {}, set(), id="serve-image"),
        pytest.param(["serving.check_concurrency=[2]"], {}, set(), id="live-check"),
        # how the builds and the first runs are guarded, not what they make
        pytest.param(["optimize.build_timeout_s=60"], {}, set(), id="build-limit"),
        pytest.param(["optimize.variants_per_process=1"], {}, set(), id="build-processes"),
        pytest.param(["benchmark.load_timeout_s=60"], {}, set(), id="load-limit"),
        # a builder of one's own is a variant more: optimize onward
        pytest.param(
            [f"optimize.extra_variants=[{extra('mine', 'answers')}]"],
            {},
            {"optimize", "benchmark"},
            id="extra-builder",
        ),
    ],
)
def test_a_change_reruns_exactly_the_steps_whose_outputs_it_decides(
    overrides: list[str], values: dict[str, str], rerun: set[str]
) -> None:
    cache: dict[str, dict[str, str]] = {}
    first = simulate(load_config(CLUSTER), {}, "cifar-first", cache)
    assert first.ran == ALL
    second = simulate(load_config(CLUSTER, overrides), values, "cifar-second", cache)
    assert second.ran == rerun
    for step in STEPS:
        key = second.keys[step]
        assert ARGO_KEY.fullmatch(key) and len(key) <= 253, key
        # a hit hands on the earlier run's outputs, URIs included, never this run's
        made = "cifar-second" if step in rerun else "cifar-first"
        assert second.outputs[step]["workflow"] == made
    if "train" not in rerun:
        root = load_config(CLUSTER).storage.root_uri.rstrip("/")
        assert second.outputs["train"]["model-uri"] == f"{root}/runs/cifar-first/model"


def test_an_unchanged_run_reuses_all_and_reads_the_earlier_outputs() -> None:
    cache: dict[str, dict[str, str]] = {}
    simulate(load_config(CLUSTER), {}, "cifar-first", cache)
    again = simulate(load_config(CLUSTER), {}, "cifar-second", cache)
    assert again.ran == set()
    root = load_config(CLUSTER).storage.root_uri.rstrip("/")
    assert again.outputs["optimize"]["optimized"] == f"{root}/runs/cifar-first/optimized"
    assert again.outputs["benchmark"]["report-uri"] == f"{root}/runs/cifar-first/benchmark"


@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_key_is_its_parts(step: str) -> None:
    """Image, config, then the parameters and inputs the step reads, each 12 hex digits:
    what the resubmit plan compares part by part."""
    cfg = load_config(CLUSTER)
    run = simulate(cfg, {}, "cifar-first", {})
    name, parts = split_key(run.keys[step])
    assert name == step
    wanted = ["image", "config"] + ["parameters"] * bool(STEPS[step].params)
    assert list(parts) == wanted + ["inputs"] * bool(STEPS[step].inputs)
    assert parts["image"] == memo_keys.part([cfg.images.image(STEPS[step].image)])  # type: ignore[arg-type]
    assert run.keys[step].startswith(key_of(cfg, step).split("{{")[0])


def test_a_parameter_a_step_reads_through_a_field_is_keyed_once() -> None:
    """train.epochs is the parameter epochs: in the key's parameters, not its config, so the
    config's default and a -p value of the same number give the same key."""
    cache: dict[str, dict[str, str]] = {}
    simulate(load_config(CLUSTER, ["train.epochs=5"]), {}, "cifar-first", cache)
    assert simulate(load_config(CLUSTER), {"epochs": "5"}, "cifar-second", cache).ran == set()


def copy_source(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    shutil.copytree(
        REPO_ROOT / "steps", root / "steps", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root


@pytest.mark.parametrize(
    ("edited", "changed"),
    [
        pytest.param("steps/optimize/builders.py", {"optimize"}, id="optimize"),
        pytest.param("steps/benchmark/report.py", {"benchmark"}, id="benchmark"),
        pytest.param("steps/serve/app.py", set(), id="serve"),
        pytest.param("steps/common/storage/uri.py", ALL, id="common"),
    ],
)
def test_locally_the_source_stands_in_for_the_image(
    tmp_path: Path, edited: str, changed: set[str]
) -> None:
    """A local run's key names the step's folder and steps/common/, hashed: an edit
    changes the identity of exactly the steps that run that code (the cluster's image is
    one for optimize and benchmark; their sources are two)."""
    root = copy_source(tmp_path)
    before = {s: source_identity(STEPS[s].package, root) for s in STEPS}
    with (root / edited).open("a") as handle:
        handle.write("\n# edited\n")
    after = {s: source_identity(STEPS[s].package, root) for s in STEPS}
    assert {s for s in STEPS if before[s] != after[s]} == changed
    assert before == {s: source_identity(STEPS[s].package) for s in STEPS}  # content, not place


def test_a_local_key_names_the_source_not_the_image() -> None:
    cfg = load_config(REPO_ROOT / "configs" / "smoke.yaml")
    local, tagged = (
        simulate(
            load_config(REPO_ROOT / "configs" / "smoke.yaml", overrides),
            {},
            "run",
            {},
            source_keys=True,
        )
        for overrides in ([], ["images.tag=9.9.9"])
    )
    assert local.keys == tagged.keys  # no image runs here: its tag decides nothing
    cluster = simulate(cfg, {}, "run", {})
    for step in STEPS:
        assert split_key(local.keys[step])[1]["image"] != split_key(cluster.keys[step])[1]["image"]
        assert (
            split_key(local.keys[step])[1]["config"] == split_key(cluster.keys[step])[1]["config"]
        )


def test_each_memo_entry_is_small() -> None:
    """What Argo saves per success (configmap_cache.go Entry: the node's outputs): the
    parameters and artifact references each memoized template declares, each value as long
    as a long URI, and no stdout: Argo captures ``outputs.result`` only when the workflow
    refers to it (v4.0.5 workflow/controller/operator.go ``hasOutputResultRef``), and no
    task refers to a memoized step's. Far under the 1 MiB a ConfigMap holds."""
    template = simulate(load_config(CLUSTER), {}, "cifar-first", {}).template
    text = json.dumps(template)
    for step in STEPS:
        for name in [step, "train-multinode"] if step == "train" else [step]:
            assert f"{name}.outputs.result" not in text and f"'{name}'].outputs.result" not in text
            declared = next(t for t in template["spec"]["templates"] if t["name"] == name)
            outputs = declared["outputs"]
            entry = {
                "nodeID": "cifar-" + "x" * 50 + "-1234567890",
                "outputs": {
                    "parameters": [
                        {"name": p["name"], "value": "v" * 300} for p in outputs["parameters"]
                    ],
                    "artifacts": [
                        {"name": a["name"], "s3": {"key": "k" * 300}}
                        for a in outputs.get("artifacts", [])
                    ],
                    "exitCode": "0",
                },
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "lastHitTimestamp": "2026-01-01T00:00:00Z",
            }
            assert len(json.dumps(entry)) < 4096, (name, len(json.dumps(entry)))
