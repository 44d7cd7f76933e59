"""The config model: files, overrides, and errors that name the field and its origin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from steps.common.config import (
    ConfigError,
    PipelineConfig,
    flatten,
    load_config,
    with_overrides,
)
from steps.common.version import package_version
from tests.helpers.paths import REPO_ROOT

CONFIGS = sorted((REPO_ROOT / "configs").glob("*.yaml"))


def test_local_yaml_is_the_embedded_default() -> None:
    assert load_config(REPO_ROOT / "configs" / "local.yaml") == PipelineConfig()
    assert load_config() == PipelineConfig()


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_with_the_package_version_as_tag(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.images.tag == package_version()
    assert ":latest" not in cfg.images.image("train")


@pytest.mark.parametrize(
    ("override", "field", "expected"),
    [
        ("train.epochs=30", "train.epochs", "30"),
        ("train.lr=0.05", "train.lr", "0.05"),
        ("train.nproc_per_node=2", "train.nproc_per_node", "2"),
        ("train.target_accuracy=0.94", "train.target_accuracy", "0.94"),
        ("benchmark.batch_sizes=[1, 32]", "benchmark.batch_sizes", "[1, 32]"),
        (
            "storage.endpoint_url=http://127.0.0.1:9000",
            "storage.endpoint_url",
            "http://127.0.0.1:9000",
        ),
        ("cluster.node_selector={gpu: a100}", "cluster.node_selector", "{'gpu': 'a100'}"),
        ("data.source=synthetic:100", "data.source", "synthetic:100"),
    ],
)
def test_override_sets_one_field(override: str, field: str, expected: str) -> None:
    cfg = load_config(REPO_ROOT / "configs" / "smoke.yaml", [override])
    assert flatten(cfg)[field] == expected
    untouched = load_config(REPO_ROOT / "configs" / "smoke.yaml")
    changed = {k for k, v in flatten(cfg).items() if flatten(untouched)[k] != v}
    assert changed <= {field}


def test_override_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  epochs: 3\n")
    assert load_config(path).train.epochs == 3
    assert load_config(path, ["train.epochs=7"]).train.epochs == 7
    assert load_config(path).train.batch_size == PipelineConfig().train.batch_size


@pytest.mark.parametrize(
    ("text", "overrides", "match"),
    [
        (
            "train:\n  epochz: 3\n",
            [],
            r"c\.yaml: train\.epochz: no such field; did you mean train\.epochs\?$",
        ),
        ("trian:\n  epochs: 3\n", [], r"c\.yaml: trian: no such section; did you mean train\?$"),
        ("train:\n  epochs: 0\n", [], r"c\.yaml: train\.epochs: Input should be greater"),
        ("train:\n  model: vgg\n", [], r"c\.yaml: train\.model: Input should be 'resnet9'"),
        ("images:\n  tag: latest\n", [], r"c\.yaml: images\.tag: .*not 'latest'"),
        ("data:\n  md5: xyz\n", [], r"c\.yaml: data\.md5: .*not 32 lowercase hex"),
        ("train: [1, 2]\n", [], r"c\.yaml: train: Input should be a valid dictionary"),
        ("- a\n- b\n", [], r"c\.yaml: top level must be a mapping"),
        ("train: {epochs: 3\n", [], r"c\.yaml: not valid YAML"),
        (
            "",
            ["train.epochs=abc"],
            r"--set train\.epochs=abc: train\.epochs: Input should be a valid",
        ),
        ("", ["train.epochz=3"], r"--set train\.epochz=3: train\.epochz: no such field; did you"),
        (
            "",
            ["trian.epochs=3"],
            r"^--set trian\.epochs=3: trian: no such section; did you mean train",
        ),
        (
            "",
            ["train.zzzzzz=3"],
            r"train\.zzzzzz: no such field; there are train\.model, train\.epochs, ",
        ),
        ("", ["epochs=3"], r"--set 'epochs=3': expected section\.field=value"),
        ("", ["train.epochs"], r"--set 'train\.epochs': expected section\.field=value"),
        (
            "train:\n  epochs: 3\n",
            ["train.epochs.x=3"],
            r"--set train\.epochs\.x: epochs is not a section",
        ),
    ],
)
def test_bad_config_names_field_and_origin(
    tmp_path: Path, text: str, overrides: list[str], match: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config(path, overrides)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["train.epochs=0"], r"^--set train\.epochs=0: train\.epochs: Input should be greater"),
        # an error across a section's fields names the override that made it (first-hour)
        (["cluster.nodes=1"], r"^--set cluster\.nodes=1: cluster: .*elastic_min_nodes"),
    ],
    ids=["bad-value", "across-fields"],
)
def test_more_overrides_on_a_loaded_config_are_checked_as_load_config_checks_them(
    tmp_path: Path, overrides: list[str], match: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  epochs: 3\ncluster:\n  nodes: 3\n  elastic_min_nodes: 2\n")
    loaded = load_config(path, ["train.lr=0.1"])
    assert with_overrides(loaded, ["train.epochs=5"], path) == load_config(
        path, ["train.lr=0.1", "train.epochs=5"]
    )
    with pytest.raises(ConfigError, match=match):
        load_config(path, overrides)
    with pytest.raises(ConfigError, match=match):
        with_overrides(load_config(path), overrides, path)


def test_processes_per_node_is_one_rule_over_two_sections() -> None:
    def processes(nproc: str, gpus: int) -> int:
        cfg = load_config(None, [f"train.nproc_per_node={nproc}", f"cluster.gpus_per_node={gpus}"])
        return cfg.processes_per_node()

    assert (processes("auto", 0), processes("auto", 4), processes("2", 0), processes("2", 4)) == (
        1, 4, 2, 2,
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"train\.nproc_per_node 4 > cluster\.gpus_per_node 2"):
        processes("4", 2)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read config"):
        load_config(tmp_path / "nope.yaml")


def test_cli_prints_merged_config_and_exits_2_on_error() -> None:
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "steps.config",
            "--config",
            "configs/smoke.yaml",
            "--set",
            "train.epochs=5",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert "epochs: 5" in ok.stdout and "source: synthetic:2000" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "steps.config", "--set", "train.epochs=-1"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0
    assert "--set train.epochs=-1: train.epochs" in bad.stderr


@pytest.mark.parametrize(
    ("override", "field", "value"),
    [
        ("data.md5=00000000000000000000000000000000", "md5", "0" * 32),
        ("train.target_accuracy=null", "target_accuracy", None),
        ("train.compile=true", "compile", True),
        ("train.nproc_per_node=auto", "nproc_per_node", "auto"),
        ("cluster.cpu=4", "cpu", "4"),
    ],
)
def test_override_scalars_follow_the_field_type(override: str, field: str, value: object) -> None:
    cfg = load_config(REPO_ROOT / "configs" / "cluster.yaml", [override])
    section = getattr(cfg, override.split(".")[0])
    assert getattr(section, field) == value
