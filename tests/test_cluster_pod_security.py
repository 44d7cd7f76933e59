"""Pod Security Admission (issue 38 item 7): every namespace the install creates carries an
``enforce`` level, and every pod the install and a rendered workflow start there meets it,
checked against the profiles' rules as kubernetes/website content/en/docs/concepts/
security/pod-security-standards.md defines them (Baseline: host namespaces, privileged,
capabilities beyond the baseline list, hostPath, hostPorts; Restricted, on top: volume
types, privilege escalation, running as non-root, runAsUser 0, seccomp, capabilities drop
ALL and add at most NET_BIND_SERVICE). The API server's PodSecurity plugin is the judge on
a cluster; this is its rules read from the standard.
"""

from __future__ import annotations

from typing import Any

import pytest

from steps.common.config import load_config
from tests.helpers import cluster_build
from tests.helpers.cluster_build import POPULATE, SHARED_VENDOR, VENDOR
from tests.helpers.cluster_pods import workflow_pods
from tests.helpers.paths import REPO_ROOT

ENFORCE = "pod-security.kubernetes.io/enforce"
# Baseline, "Capabilities": the list a container may add
BASELINE_CAPS = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
# Restricted, "Volume Types"
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
LEVELS = ("privileged", "baseline", "restricted")


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def baseline_problems(spec: dict[str, Any]) -> list[str]:
    found = [f for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)]
    found += [f"hostPath {v['name']}" for v in spec.get("volumes", []) if "hostPath" in v]
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            found.append(f"{c['name']}: privileged")
        extra = set((sc.get("capabilities") or {}).get("add", [])) - BASELINE_CAPS
        if extra:
            found.append(f"{c['name']}: adds {sorted(extra)}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            found.append(f"{c['name']}: hostPort")
    return found


def restricted_problems(spec: dict[str, Any]) -> list[str]:
    found = baseline_problems(spec)
    pod = spec.get("securityContext") or {}
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {v['name']}: {sorted(kinds)}")
    if pod.get("runAsUser") == 0:
        found.append("pod runAsUser 0")
    for c in _containers(spec):
        sc, name = c.get("securityContext") or {}, c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation not false")
        if not sc.get("runAsNonRoot", pod.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot not true")
        if sc.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile {seccomp}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []):
            found.append(f"{name}: does not drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: adds {caps['add']}")
    return found


def problems(level: str, spec: dict[str, Any]) -> list[str]:
    return {"privileged": lambda s: [], "baseline": baseline_problems}.get(
        level, restricted_problems
    )(spec)


@pytest.fixture(scope="module")
def builds() -> dict[str, tuple[dict[str, Any], ...]]:
    found = cluster_build.vendored_builds()
    if found is None:
        pytest.skip(f"no vendored manifests in {SHARED_VENDOR} or {VENDOR}: {POPULATE}")
    return found


def levels(builds: dict) -> dict[str, str | None]:
    return {
        d["metadata"]["name"]: (d["metadata"].get("labels") or {}).get(ENFORCE)
        for docs in builds.values()
        for d in docs
        if d["kind"] == "Namespace"
    }


def test_every_namespace_has_its_level(builds) -> None:
    found = levels(builds)
    assert found["argo"] == found["mlflow"] == found["seaweedfs"] == "restricted"
    assert found["kserve"] == found["kubeflow-system"] == "restricted"
    assert found["kubeflow"] == found["volcano-system"] == "baseline"
    # cert-manager's release manifest is applied as a file, unlabelled: docs/cluster.md says
    unlabelled = {n for n, level in found.items() if level not in LEVELS}
    assert unlabelled == {"cert-manager"}


def test_every_installed_pod_meets_its_namespaces_level(builds) -> None:
    found = levels(builds)
    for docs in builds.values():
        for d in docs:
            if d["kind"] in ("Deployment", "Job", "DaemonSet", "StatefulSet"):
                level = found.get(d["metadata"]["namespace"]) or "privileged"
                spec = d["spec"]["template"]["spec"]
                assert problems(level, spec) == [], (d["metadata"]["name"], level)


CASES = [
    pytest.param(name, launcher, id=f"{name}-{launcher}")
    for name in ("local", "smoke", "cluster", "kind")
    for launcher in ("pytorchjob", "trainjob")
]


@pytest.mark.parametrize(("name", "launcher"), CASES)
def test_every_pod_of_a_run_is_restricted(name: str, launcher: str) -> None:
    cfg = load_config(REPO_ROOT / "configs" / f"{name}.yaml", [f"train.launcher={launcher}"])
    for pod in workflow_pods(cfg):
        if pod["spec"]:
            assert restricted_problems(pod["spec"]) == [], pod["name"]


@pytest.mark.parametrize(
    ("sets", "level"),
    [
        (["cluster.rdma=true"], "privileged"),  # root with IPC_LOCK: not even baseline
        (["cluster.rdma=true", "cluster.rdma_memlock=node"], "restricted"),
        (["cluster.host_network=true"], "privileged"),  # baseline forbids hostNetwork
    ],
)
def test_the_rdma_modes_need_the_level_docs_cluster_md_names(sets: list[str], level: str) -> None:
    """docs/cluster.md, "Security": the training namespace's level per RDMA mode."""
    cfg = load_config(REPO_ROOT / "configs" / "cluster.yaml", sets)
    ranks = [p for p in workflow_pods(cfg) if p["name"].startswith("train/")]
    strictest = next(
        lvl for lvl in reversed(LEVELS) if all(problems(lvl, p["spec"]) == [] for p in ranks)
    )
    assert strictest == level


def test_the_checker_finds_each_rule_broken() -> None:
    good = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "c",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "volumes": [{"name": "e", "emptyDir": {}}],
    }
    assert restricted_problems(good) == []
    import copy

    def broken(change) -> dict[str, Any]:
        spec = copy.deepcopy(good)
        change(spec)
        return spec

    sc = lambda s: s["containers"][0]["securityContext"]  # noqa: E731
    for change in (
        lambda s: s.update(hostNetwork=True),
        lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
        lambda s: sc(s).pop("allowPrivilegeEscalation"),
        lambda s: sc(s).update(capabilities={"drop": ["ALL"], "add": ["IPC_LOCK"]}),
        lambda s: sc(s).update(runAsUser=0),
        lambda s: s["securityContext"].pop("seccompProfile"),
        lambda s: s["securityContext"].pop("runAsNonRoot"),
        lambda s: sc(s).update(capabilities={}),
    ):
        assert restricted_problems(broken(change)), change
    assert baseline_problems(broken(lambda s: sc(s).update(capabilities={"add": ["IPC_LOCK"]})))
    assert not baseline_problems(
        broken(lambda s: sc(s).update(capabilities={"add": ["DAC_OVERRIDE"]}))
    )
