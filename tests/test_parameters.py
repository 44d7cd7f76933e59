"""Workflow parameters (``-p name=value``): parsed and checked before anything is sent,
applied to a local run as the config fields they stand for, and read by the steps of the
WorkflowTemplate as ``{{workflow.parameters.x}}``."""

from __future__ import annotations

import re

import pytest

from flows import cifar
from flows.cifar import build_template
from flows.cli import main as cli
from flows.errors import FlowError
from flows.pipeline import parameters
from flows.pipeline.parameters import step_settings
from steps.common.config import load_config
from tests.helpers.flow_helpers import argo_substitute
from tests.helpers.paths import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
KNOWN = (
    "data-source, model, epochs, batch-size, lr, target-accuracy, nodes, nproc-per-node, "
    "gpus-per-node"
)


def test_parse_keeps_values_with_equals_signs() -> None:
    assert parameters.parse(["data-source=s3://b/k?v=1", "lr=0.1"]) == {
        "data-source": "s3://b/k?v=1",
        "lr": "0.1",
    }


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        pytest.param(
            ["-p", "epochz=3"],
            rf"-p epochz: unknown parameter; did you mean epochs\? parameters: {KNOWN}$",
            id="unknown",
        ),
        pytest.param(["-p", "epochs"], r"-p epochs: give name=value", id="no-value"),
        # reported as typed, -p, with the field it stands for
        pytest.param(
            ["-p", "epochs=0"], r"^cifar: error: -p epochs=0: train\.epochs", id="bad-value"
        ),
        pytest.param(
            ["-p", "model=vgg"], r"^cifar: error: -p model=vgg: train\.model", id="bad-choice"
        ),
        pytest.param(
            ["-p", "nproc-per-node=4", "-p", "gpus-per-node=2"],
            r"train\.nproc_per_node 4 > cluster\.gpus_per_node 2",
            id="more-processes-than-gpus",
        ),
    ],
)
@pytest.mark.parametrize("mode", [["--render"], ["--submit"], []])
def test_bad_parameters_are_one_line_and_exit_2(argv, match, mode, capsys, monkeypatch) -> None:
    monkeypatch.setenv("ARGO_HOST", "http://127.0.0.1:9")  # never reached
    assert cli.main(["--config", SMOKE, *mode, *argv], cifar) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(match, err), err


def test_the_template_declares_every_parameter_with_the_config_default() -> None:
    cfg = load_config(SMOKE, ["train.target_accuracy=0.5", "cluster.gpus_per_node=2"])
    spec = build_template(cfg).to_dict()["spec"]
    declared = {p["name"]: p["value"] for p in spec["arguments"]["parameters"]}
    assert declared == {
        "data-source": "synthetic:2000",
        "model": cfg.train.model,
        "epochs": "4",
        "batch-size": str(cfg.train.batch_size),
        "lr": str(cfg.train.lr),
        "target-accuracy": "0.5",
        "nodes": "1",
        "nproc-per-node": str(cfg.train.nproc_per_node),
        "gpus-per-node": "2",
    }


def test_auto_processes_per_node_default_to_one_per_gpu() -> None:
    cfg = load_config(SMOKE, ["train.nproc_per_node=auto", "cluster.gpus_per_node=4"])
    assert parameters.defaults(cfg)["nproc-per-node"] == "4"
    cfg = load_config(SMOKE, ["train.nproc_per_node=auto"])
    assert parameters.defaults(cfg)["nproc-per-node"] == "1"


def test_steps_read_the_parameters_and_never_the_configs_value() -> None:
    cfg = load_config(SMOKE, ["train.epochs=7", "train.lr=0.05"])
    settings = step_settings(cfg)
    pairs = dict(s.split("=", 1) for s in settings[1::2])
    assert pairs["train.epochs"] == "{{workflow.parameters.epochs}}"
    assert pairs["train.lr"] == "{{workflow.parameters.lr}}"
    assert pairs["data.source"] == "{{workflow.parameters.data-source}}"
    assert "=7" not in " ".join(settings) and "=0.05" not in " ".join(settings)
    # a field that is no parameter still travels as the config's value
    assert pairs["train.warmup_epochs"] == str(cfg.train.warmup_epochs)
    # and the parameters' defaults, substituted as Argo does, are the config's values
    filled = [argo_substitute(s, parameters.defaults(cfg)) for s in settings[1::2]]
    literal = dict(s.split("=", 1) for s in filled)
    assert (literal["train.epochs"], literal["train.lr"]) == ("7", "0.05")
    assert literal["data.source"] == cfg.data.source


@pytest.mark.parametrize("mode", [["--render"], []], ids=["render", "here"])
def test_the_config_is_read_once_with_p_values(mode, monkeypatch) -> None:
    """-p values are applied to the loaded config (each checked as its field), not by
    reading and validating the whole config a second time."""
    read = []
    monkeypatch.setattr(cli, "load_config", lambda *a: read.append(a) or load_config(*a))
    monkeypatch.setattr(cli, "run_here", lambda *args: 0)
    assert cli.main(["--config", SMOKE, *mode, "-p", "epochs=1", "-p", "lr=0.5"], cifar) == 0
    assert len(read) == 1


def test_a_local_run_applies_p_as_the_fields_it_stands_for(monkeypatch) -> None:
    seen = {}

    def fake_run_here(pipeline, base, given, values, args):  # the runner: tested elsewhere
        seen.update(base=base, given=given, values=values)
        return 0

    monkeypatch.setattr(cli, "run_here", fake_run_here)
    assert (
        cli.main(["--config", SMOKE, "-p", "epochs=1", "-p", "data-source=synthetic:64"], cifar)
        == 0
    )
    assert (seen["given"].train.epochs, seen["given"].data.source) == (1, "synthetic:64")
    # the template keeps the config's values as its defaults; the run gets the given ones
    assert (seen["base"].train.epochs, seen["base"].data.source) == (4, "synthetic:2000")
    assert seen["values"] == {"epochs": "1", "data-source": "synthetic:64"}


def test_parameters_are_refused_by_name_in_code_too() -> None:
    with pytest.raises(FlowError, match="unknown parameter"):
        parameters.parse(["x=1"])
