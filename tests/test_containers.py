"""Images and CI definitions: Dockerfiles pass hadolint, workflows pass actionlint, every
image tag is the package version, and images run as non-root."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "containers"))
import images

DOCKERFILES = sorted((REPO_ROOT / "containers").glob("*.Dockerfile"))
WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml"))


def tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    assert Path(found).exists(), f"{name} is missing: pip install -e '.[dev]'"
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_passes_hadolint(dockerfile: Path) -> None:
    result = subprocess.run(
        [tool("hadolint"), "--no-color", str(dockerfile)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_is_versioned_labelled_and_non_root(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    stages = text.split("\nFROM ")
    final = stages[-1]
    assert re.search(r"^USER 10001$", final, re.MULTILINE), "final stage must run as non-root"
    assert 'org.opencontainers.image.version="${VERSION}"' in final
    assert 'org.opencontainers.image.revision="${REVISION}"' in final
    assert "==${VERSION}" in final  # installs exactly the package version
    for base in re.findall(r"^ARG \w+_IMAGE=(\S+)$", text, re.MULTILINE):
        assert not base.endswith(":latest") and ":" in base, base


def test_data_image_installs_no_torch() -> None:
    data = (REPO_ROOT / "containers" / "data.Dockerfile").read_text()
    assert '"cifar-pipeline==${VERSION}"' in data  # the core only, no extras
    core = re.search(
        r"^dependencies = \[(.*?)\]", (REPO_ROOT / "pyproject.toml").read_text(), re.S | re.M
    )
    assert core and "torch" not in core.group(1)


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_github_workflow_passes_actionlint(workflow: Path) -> None:
    result = subprocess.run(
        [tool("actionlint"), "-no-color", str(workflow)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ci_workflow_runs_the_ci_script() -> None:
    ci = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "ci.yml").read_text())
    steps = [step.get("run", "") for job in ci["jobs"].values() for step in job["steps"]]
    assert any("bash .ci/run" in run for run in steps)
    ci_run = (REPO_ROOT / ".ci" / "run").read_text()
    readme = (REPO_ROOT / "README.md").read_text()
    test_command = next(
        line for line in ci_run.splitlines() if "pytest" in line and not line.startswith("#")
    )
    assert test_command in readme  # .ci/run runs exactly the README's test command


def test_image_tags_everywhere_equal_the_package_version() -> None:
    version = images.package_version(REPO_ROOT)
    assert images.check() == []
    assert set(images.config_tags().values()) <= {version, "<default>"}
    for command in images.build_commands("registry.example/team", list(images.IMAGES), push=True):
        for arg in command:
            if arg.startswith("registry.example/"):
                assert arg.endswith(f":{version}"), arg
        assert not any(arg.endswith(":latest") for arg in command)
    from importlib import metadata

    from steps.common.config import ImagesConfig

    assert ImagesConfig().tag == version  # the config's default tag
    assert metadata.version("cifar-pipeline") == version  # the installed package is this one


def test_check_names_a_config_with_a_stale_tag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "old.yaml").write_text("images:\n  tag: '0.0.9'\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nversion = "0.1.0"\n')
    monkeypatch.setattr(images, "ROOT", tmp_path)
    assert images.check() == [
        "configs/old.yaml: images.tag '0.0.9' is not the package version '0.1.0'"
    ]
    assert images.main(["check"]) == 1


def test_optimize_image_has_the_tensorrt_extras_quantizer() -> None:
    """NGC's base brings torch-tensorrt; ModelOpt (TensorRT INT8) is installed with the
    [tensorrt] extra's own pins, or tensorrt_int8 would be skipped on every GPU."""
    import tomllib

    extra = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pins = [p for p in extra["optional-dependencies"]["tensorrt"] if "torch-tensorrt" not in p]
    dockerfile = (REPO_ROOT / "containers" / "optimize.Dockerfile").read_text()
    assert pins and all(f'"{pin}"' in dockerfile for pin in pins), pins


FREED = ("/usr/local/lib/android", "/usr/share/dotnet", "/opt/ghc")  # the runner's largest


def builds_optimize(job: dict, step: dict) -> bool:
    """Whether a workflow step builds the optimize image (on NGC's ~20 GB base by default)."""
    run = step.get("run", "")
    if "optimize.Dockerfile" in run:
        return True
    only = re.search(r"images\.py build .*--only[ =](\S+)", run)
    if "images.py build" in run and (only is None or "optimize" in only.group(1).split(",")):
        return True
    dockerfile = str(step.get("with", {}).get("file", ""))
    matrix = job.get("strategy", {}).get("matrix", {}).get("image", [])
    return step.get("uses", "").startswith("docker/build-push-action") and (
        "optimize" in dockerfile or ("matrix.image" in dockerfile and "optimize" in matrix)
    )


def frees_disk_for_optimize(step: dict) -> bool:
    condition = str(step.get("if", ""))
    runs_for_optimize = not condition or "'optimize'" in condition
    return all(path in step.get("run", "") for path in FREED) and runs_for_optimize


def test_the_optimize_image_is_built_only_after_freeing_the_runners_disk() -> None:
    """Issue 21, defect 9: a hosted runner has too little free disk for the NGC base."""
    built = []
    for workflow in WORKFLOWS:
        for name, job in yaml.safe_load(workflow.read_text())["jobs"].items():
            steps = job["steps"]
            for index, step in enumerate(steps):
                if builds_optimize(job, step):
                    built.append(f"{workflow.name}:{name}")
                    freed = any(frees_disk_for_optimize(s) for s in steps[:index])
                    assert freed, f"{workflow.name}: job {name} builds optimize on a full disk"
    assert sorted(built) == ["e2e.yml:kind", "images.yml:build"]


def test_every_image_is_built_by_the_images_workflow() -> None:
    workflow = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "images.yml").read_text())
    assert workflow["jobs"]["build"]["strategy"]["matrix"]["image"] == list(images.IMAGES)
    for name, dockerfile in images.IMAGES.items():
        assert dockerfile == f"{name}.Dockerfile"
        assert (REPO_ROOT / "containers" / dockerfile).is_file()


def test_serve_image_runs_the_server_without_torch() -> None:
    """The serving image installs the [serve] extra (no torch: the champion is ONNX Runtime
    and OpenVINO) and starts ``steps.serve`` on every interface, as the InferenceService's
    predictor does."""
    import tomllib

    dockerfile = (REPO_ROOT / "containers" / "serve.Dockerfile").read_text()
    assert '"cifar-pipeline[serve]==${VERSION}"' in dockerfile
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.M)
    assert cmd and yaml.safe_load(cmd.group(1))[:5] == [
        "python", "-m", "steps.serve", "--host", "0.0.0.0"
    ]  # fmt: skip
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    serve = project["optional-dependencies"]["serve"]
    assert not any(p.startswith(("torch", "cifar-pipeline")) for p in serve), serve
    assert any(p.startswith("uvicorn") for p in serve)
