"""configs/cluster/vendor.py and vendor.lock: every upstream file configs/cluster builds from
is locked at a pinned tag, no kustomization reaches the network, and the script refuses a
tampered or missing file by name without writing anything."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.helpers.cluster_build import vendor
from tests.helpers.paths import REPO_ROOT

CLUSTER = REPO_ROOT / "configs" / "cluster"
VENDOR = CLUSTER / "vendor"
SCRIPT = CLUSTER / "vendor.py"
# Bare git mirrors of the pinned repositories (MIRRORS/<owner>+<name>/repo), named by the
# environment: the bump's offline check runs only where someone has them.
MIRRORS_ENV = "CIFAR_VENDOR_MIRRORS"
PINNED = {  # the versions docs/cluster.md names
    "argo": ("argoproj/argo-workflows", "v4.0.5"),
    "training-operator": ("kubeflow/trainer", "v1.9.4"),
    "trainer": ("kubeflow/trainer", "v2.3.0"),
    "jobset": ("kubernetes-sigs/jobset", "v0.12.0"),
    "volcano": ("volcano-sh/volcano", "v1.14.4"),
    "kserve": ("kserve/kserve", "v0.19.0"),
    "cert-manager": ("cert-manager/cert-manager", "v1.17.0"),
}
# no kustomization builds from it: vendor.py renders its manifest, applied with -f
CHECKED_ONLY = {"cert-manager"}
# A chart as small as cert-manager's render needs: what the Makefile fills in
# (version, appVersion, the prerelease annotation), a CRD that only crds.enabled renders,
# a template naming the release, namespace and version, and the namespace manifest.
TINY_CERT_MANAGER = {
    "deploy/charts/cert-manager/Chart.template.yaml": (
        "apiVersion: v2\nname: cert-manager\nannotations:\n"
        '  artifacthub.io/prerelease: "{{IS_PRERELEASE}}"\nversion: v0.0.0\nappVersion: v0.0.0\n'
    ),
    "deploy/charts/cert-manager/values.yaml": (
        "crds:\n  enabled: false\ncreator: helm\nstartupapicheck:\n  enabled: true\n"
    ),
    "deploy/charts/cert-manager/templates/deployment.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
        "  name: {{ .Release.Name }}-{{ .Chart.AppVersion }}\n"
        "  namespace: {{ .Release.Namespace }}\n"
        "data:\n  creator: {{ .Values.creator }}\n"
        "  startupapicheck: {{ .Values.startupapicheck.enabled | quote }}\n"
    ),
    "deploy/crds/crd-widgets.yaml": (
        "# START crd {{- if .Values.crds.enabled }}\napiVersion: v1\nkind: ConfigMap\n"
        "metadata:\n  name: widgets\n# END crd {{- end }}\n"
    ),
    "deploy/manifests/namespace.yaml": (
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cert-manager\n"
    ),
}


def pinned_helm() -> str | None:
    """The helm vendor.py renders with, or None (the dev extra brings it on Linux x86_64)."""
    try:
        return vendor.find_helm()
    except vendor.VendorError:
        return None


# Vendoring renders cert-manager's manifest: it needs the pinned helm.
needs_helm = pytest.mark.skipif(
    pinned_helm() is None, reason=f"no helm {vendor.HELM_VERSION} ({vendor.HELM_WHEEL})"
)


def kustomizations() -> list[Path]:
    return sorted(p for p in CLUSTER.rglob("kustomization.yaml") if VENDOR not in p.parents)


def references(path: Path) -> list[str]:
    """What a kustomization loads: resources, components and patch files."""
    spec = yaml.safe_load(path.read_text())
    refs = [*spec.get("resources", []), *spec.get("components", []), *spec.get("bases", [])]
    return refs + [p["path"] for p in spec.get("patches", []) if "path" in p]


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("path", kustomizations(), ids=lambda p: str(p.relative_to(CLUSTER)))
def test_no_kustomization_loads_anything_remote(path: Path) -> None:
    for ref in references(path):
        assert "://" not in ref and not ref.startswith(("github.com", "git@")), (path, ref)


def test_every_vendored_path_a_kustomization_names_is_locked() -> None:
    locked = {e.dest for e in vendor.read_lock(vendor.LOCK)}
    used = set()
    for path in kustomizations():
        for ref in references(path):
            target = Path(os.path.normpath(path.parent / ref))
            if VENDOR in target.parents:
                relative = target.relative_to(VENDOR).as_posix()
                wanted = (
                    relative if relative.endswith(".yaml") else f"{relative}/kustomization.yaml"
                )
                assert wanted in locked, f"{path}: {ref} is not in vendor.lock"
                used.add(relative.split("/")[0])
    assert used == set(PINNED) - CHECKED_ONLY, "every vendored component is built from"


def test_the_lock_pins_the_named_releases_and_only_their_manifests() -> None:
    entries = vendor.read_lock(vendor.LOCK)
    assert {e.component: (e.repo, e.tag) for e in entries} == PINNED
    assert {(p.component, p.repo, p.tag) for p in vendor.PINS} == {
        (c, *pin) for c, pin in PINNED.items()
    }
    pins = {p.component: p for p in vendor.PINS}
    for entry in entries:
        assert vendor.wanted(pins[entry.component], entry.path), entry
        assert len(entry.sha256) == 64 and int(entry.sha256, 16) >= 0, entry
    assert len({e.dest for e in entries}) == len(entries)


def mirrors_or_skip() -> Path:
    """The mirrors' folder from CIFAR_VENDOR_MIRRORS, or a skip naming what is missing."""
    folder = os.environ.get(MIRRORS_ENV)
    if not folder:
        pytest.skip(f"{MIRRORS_ENV} is not set (a folder of bare git mirrors of the pinned repos)")
    mirrors = Path(folder)
    missing = sorted(
        {p.repo for p in vendor.PINS if not (mirrors / p.repo.replace("/", "+") / "repo").is_dir()}
    )
    if missing:
        pytest.skip(f"{MIRRORS_ENV}={mirrors} has no mirror of {', '.join(missing)}")
    return mirrors


@pytest.mark.parametrize(
    ("case", "mirrors", "reason"),
    [
        ("unset", None, r"CIFAR_VENDOR_MIRRORS is not set"),
        ("an empty folder", "empty", r"has no mirror of .*argoproj/argo-workflows.*kserve/kserve"),
        ("all but one", "all-but-kserve", r"has no mirror of kserve/kserve$"),
    ],
)
def test_without_every_mirror_the_tag_check_skips_naming_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, mirrors: str | None, reason: str
) -> None:
    monkeypatch.delenv(MIRRORS_ENV, raising=False)
    if mirrors is not None:
        for pin in vendor.PINS:
            if mirrors == "all-but-kserve" and pin.repo != "kserve/kserve":
                (tmp_path / pin.repo.replace("/", "+") / "repo").mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(MIRRORS_ENV, str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match=reason):
        mirrors_or_skip()


@needs_helm
def test_the_lock_is_what_the_tags_hold(tmp_path: Path) -> None:
    """``--update --from-git`` (the bump, offline) rewrites the committed lock unchanged."""
    mirrors = mirrors_or_skip()
    lock = tmp_path / "vendor.lock"
    done = run_script(
        "--update", "--from-git", str(mirrors), "--lock", str(lock), "--dest", str(tmp_path / "v")
    )
    assert done.returncode == 0, done.stderr
    assert lock.read_text() == vendor.LOCK.read_text()


def synthetic(tmp_path: Path) -> tuple[Path, Path]:
    """A source tree with one file per pinned component and the lock that matches it."""
    source, lines = tmp_path / "source", []
    for pin in vendor.PINS:
        path = pin.paths[0] + ("kustomization.yaml" if pin.paths[0].endswith("/") else "")
        files = {path: f"kind: Kustomization  # {pin.component}\n"}
        if pin.component == vendor.CERT_MANAGER:
            files = TINY_CERT_MANAGER
        for path, text in files.items():
            data = text.encode()
            (source / pin.component / path).parent.mkdir(parents=True, exist_ok=True)
            (source / pin.component / path).write_bytes(data)
            lines.append(
                f"{pin.component} {pin.repo} {pin.tag} {path} {hashlib.sha256(data).hexdigest()}"
            )
    lock = tmp_path / "vendor.lock"
    lock.write_text("\n".join(lines) + "\n")
    return source, lock


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def copied(dest: Path) -> dict[str, bytes]:
    """The vendored files, without what vendor.py rendered from them."""
    return {k: v for k, v in tree(dest).items() if k != vendor.CERT_MANAGER_MANIFEST}


def tamper(source: Path) -> str:
    victim = next(p for p in sorted(source.rglob("*.yaml")) if "/argo/" in p.as_posix())
    victim.write_bytes(victim.read_bytes() + b"# changed\n")
    return r"argo/manifests/cluster-install/kustomization\.yaml: sha256 \w+ differs"


def remove(source: Path) -> str:
    (source / "volcano" / "installer" / "volcano-development.yaml").unlink()
    return r"volcano/installer/volcano-development\.yaml: missing"


def stale_tag(lock: Path) -> str:
    lock.write_text(lock.read_text().replace(" v4.0.5 ", " v4.0.4 "))
    return r"does not match PINS in vendor\.py .*run --update"


@needs_helm
@pytest.mark.parametrize(
    ("case", "damage"),
    [
        ("a tampered file", lambda source, lock: tamper(source)),
        ("a missing file", lambda source, lock: remove(source)),
        ("a lock of another tag", lambda source, lock: stale_tag(lock)),
    ],
)
def test_a_bad_source_is_refused_by_name_and_nothing_is_written(
    tmp_path: Path, case: str, damage: Callable[[Path, Path], str]
) -> None:
    source, lock = synthetic(tmp_path)
    dest = tmp_path / "cluster" / "vendor"
    done = run_script("--from", str(source), "--lock", str(lock), "--dest", str(dest))
    assert done.returncode == 0, done.stderr
    assert copied(dest) == tree(source)
    before = tree(dest)
    expected = damage(source, lock)
    done = run_script("--from", str(source), "--lock", str(lock), "--dest", str(dest))
    assert done.returncode == 1, case
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert re.search(expected, done.stderr), done.stderr
    assert tree(dest) == before, "the vendored tree is left as it was"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["vendor"], "no temporary left"


@needs_helm
def test_check_names_a_vendored_file_changed_in_place(tmp_path: Path) -> None:
    source, lock = synthetic(tmp_path)
    dest = tmp_path / "vendor"
    assert (
        run_script("--from", str(source), "--lock", str(lock), "--dest", str(dest)).returncode == 0
    )
    assert run_script("--check", "--lock", str(lock), "--dest", str(dest)).returncode == 0
    tamper(dest)
    done = run_script("--check", "--lock", str(lock), "--dest", str(dest))
    assert done.returncode == 1
    assert "argo/manifests/cluster-install/kustomization.yaml: sha256" in done.stderr


def test_a_tag_archive_gives_the_pinned_yaml_files_without_its_root_folder() -> None:
    """GitHub's tag archive has one root folder (``<name>-<version>/``) and every file of the
    tag; only the pinned folders' YAML files are kept, at their paths in the repository, and
    none whose name climbs out of them."""
    (pin,) = [p for p in vendor.PINS if p.component == "argo"]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in (
            "manifests/cluster-install/kustomization.yaml",
            "manifests/base/crds/full/README.md",
            "manifests/quick-start/minimal/kustomization.yaml",
            "manifests/cluster-install/../../../outside.yaml",
        ):
            info = tarfile.TarInfo(f"argo-workflows-4.0.5/{name}")
            info.size = len(name)
            tar.addfile(info, io.BytesIO(name.encode()))
    kept = "manifests/cluster-install/kustomization.yaml"
    assert vendor.files_from_archive(pin, buffer.getvalue(), strip=True) == {kept: kept.encode()}


def test_update_refuses_a_vendored_tree_as_its_source(tmp_path: Path) -> None:
    done = run_script("--update", "--from", str(tmp_path), "--lock", str(tmp_path / "l"))
    assert done.returncode == 2
    assert "--update reads the tags themselves" in done.stderr
    assert not (tmp_path / "l").exists()


@needs_helm
def test_cert_managers_manifest_is_rendered_as_its_makefile_does(tmp_path: Path) -> None:
    """From the locked chart: the tag as the chart's version, the CRDs in with
    crds.enabled=true, creator=static, no startupapicheck, the release in namespace
    cert-manager, and the namespace manifest first."""
    source, lock = synthetic(tmp_path)
    dest = tmp_path / "vendor"
    done = run_script("--from", str(source), "--lock", str(lock), "--dest", str(dest))
    assert done.returncode == 0, done.stderr
    text = (dest / vendor.CERT_MANAGER_MANIFEST).read_text()
    assert text.startswith("# cert-manager v1.17.0: rendered by configs/cluster/vendor.py")
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert docs == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cert-manager"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "widgets"}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cert-manager-v1.17.0", "namespace": "cert-manager"},
            "data": {"creator": "static", "startupapicheck": "false"},
        },
    ]
    # Rendering again gives the same bytes: --check holds the file to them.
    assert run_script("--check", "--lock", str(lock), "--dest", str(dest)).returncode == 0
    (dest / vendor.CERT_MANAGER_MANIFEST).write_text(text.replace("static", "helm"))
    done = run_script("--check", "--lock", str(lock), "--dest", str(dest))
    assert done.returncode == 1
    assert "cert-manager/cert-manager.yaml: differs from what the locked chart renders to" in (
        done.stderr
    )


@pytest.mark.parametrize("found", ["v3.16.2", None])
def test_a_helm_of_another_version_or_none_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, found: str | None
) -> None:
    """The render is reproducible only with the pinned helm: another one, or none, stops
    the run naming the version wanted and the wheel that brings it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if found is not None:
        helm = bin_dir / "helm"
        helm.write_text(f"#!/bin/sh\necho {found}\n")
        helm.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))  # no venv's helm either
    with pytest.raises(vendor.VendorError) as refused:
        vendor.find_helm()
    message = str(refused.value)
    assert vendor.HELM_VERSION in message and vendor.HELM_WHEEL in message
    assert (f"helm {found}" if found else "helm not found") in message
