"""docs/cluster.md's install, command by command, against what each command applies: does every
object reach an API server that can take it?

A fresh cluster refuses an object whose kind no established CRD serves yet: kubectl maps
every object of one ``apply`` before it sends any ("no matches for kind"), so a CRD and an
object of its kind in one command fail, as KServe's own installer avoids by applying its
CRDs, waiting for them to be Established, then the rest (kserve/kserve v0.19.0
hack/setup/infra/manage.kserve-kustomize.sh, wait_for_crds in hack/setup/common.sh). A
webhook configuration with ``failurePolicy: Fail`` refuses every object it matches until
its server answers: the Deployment behind its Service rolled out and, where cert-manager's
cainjector writes the CA (the ``cert-manager.io/inject-ca-from*`` annotations), the CA in
the configuration. ``steps`` turns commands into what they apply and wait for;
``problems`` says which object would be refused, and why.

Commands understood (anything else is ignored): ``kubectl apply ... -k configs/cluster/X/``
and ``-f`` of cert-manager's rendered manifest (the vendored builds),
``.venv/bin/python flows/cifar.py ... --render-runtime | kubectl apply ... -f -`` (the
runtime that command prints), ``.venv/bin/python flows/cifar.py ... --submit`` (the
WorkflowTemplate, the Workflow or CronWorkflow, and what its resource templates create: the
job, the InferenceService) (``python`` on PATH, as e2e.yml runs them, too),
``kubectl wait --for=condition=established crd --all`` (or ``crd/NAME``),
``kubectl -n NS rollout status deploy/NAME ...`` and ``kubectl wait
--for=jsonpath='{.webhooks[0].clientConfig.caBundle}' KIND/NAME ...``.
Webhooks are matched by API group and resource only (selectors ignored, which can only
ask for more waiting) and only for kinds a CRD serves: the commands apply no core object
that a webhook of the install matches.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ALL = "*"
CA_INJECTION = ("cert-manager.io/inject-ca-from", "cert-manager.io/inject-ca-from-secret")
CA_BUNDLE_WAIT = "--for=jsonpath={.webhooks[0].clientConfig.caBundle}"
ESTABLISHED_WAIT = "--for=condition=established"
CERT_MANAGER_FILE = "configs/cluster/vendor/cert-manager/cert-manager.yaml"
ARGO = "argoproj.io/v1alpha1"
CLUSTER_DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"
README = Path(__file__).resolve().parents[2] / "README.md"


@dataclass
class Step:
    command: str
    applied: tuple[dict[str, Any], ...] = ()
    established: frozenset[str] = frozenset()  # CRD names, or ALL
    rolled_out: frozenset[tuple[str, str]] = frozenset()  # (namespace, Deployment)
    injected: frozenset[tuple[str, str]] = frozenset()  # (kind, name) with a caBundle
    ignores_failure: bool = False
    runtime_wanted: dict[str, Any] | None = None  # a submit's TrainJob: the runtime it needs


@dataclass
class Install:
    """What has happened so far: where each CRD, webhook configuration came from."""

    crds: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (group, kind)
    crd_at: dict[str, int] = field(default_factory=dict)  # CRD name -> first command
    hooks: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    services: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    deployments: list[dict[str, Any]] = field(default_factory=list)
    state: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (kind, name)


def cluster_steps() -> list[tuple[str, list[str]]]:
    """docs/cluster.md "Install, step by step": each numbered step's comments and commands."""
    section = CLUSTER_DOC.read_text().split("\n## Install, step by step\n")[1]
    block = section.split("\n## ")[0].split("```bash\n")[1].split("```")[0]
    steps = []
    for text in re.split(r"\n(?=# \d+\. )", block.strip()):
        lines = text.splitlines()
        comments = " ".join(line for line in lines if line.startswith("#"))
        steps.append((comments, [line for line in lines if line and not line.startswith("#")]))
    return steps


def cluster_commands() -> list[str]:
    """docs/cluster.md's install commands in order (a trailing ``# comment`` kept)."""
    return [command for _, step in cluster_steps() for command in step]


def is_python(words: list[str]) -> bool:
    """An interpreter: ``python`` on PATH (e2e.yml's) or the set-up's ``.venv/bin/python``."""
    return bool(words) and Path(words[0]).name in ("python", "python3")


def quick_start_commands() -> list[str]:
    """The README's cluster quick start: the commands of its one bash block under "Run it on
    a cluster" (comments dropped)."""
    section = README.read_text().split("\n## Run it on a cluster\n")[1].split("\n## ")[0]
    block = section.split("```bash\n")[1].split("```")[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def group_of(obj: dict[str, Any]) -> str:
    return obj["apiVersion"].rpartition("/")[0]


def _cli_output(args: list[str]) -> str:
    from flows import cifar
    from flows.cli import main as cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(args, cifar) == 0, args
    return out.getvalue()


def _flow_args(words: list[str]) -> tuple[str | None, list[str]]:
    """``--config`` and the ``--set`` values of a flows/cifar.py command line."""
    config, sets = None, []
    for flag, value in itertools.pairwise(words):
        if flag == "--config":
            config = value
        elif flag == "--set":
            sets.append(value)
    return config, sets


def rendered_runtime(config: str | None, sets: list[str]) -> dict[str, Any]:
    args = (["--config", config] if config else []) + [a for s in sets for a in ("--set", s)]
    return yaml.safe_load(_cli_output([*args, "--render-runtime"]))


def submitted(config: str | None, sets: list[str], cron: bool) -> list[dict[str, Any]]:
    """What ``--submit`` sends and what its run then creates."""
    from flows import cifar
    from steps.common.config import load_config
    from tests.helpers.k8s_refs import embedded

    cfg = load_config(config, sets)
    template = cifar.build_template(cfg).to_dict()
    run = {"apiVersion": ARGO, "kind": "CronWorkflow" if cron else "Workflow", "metadata": {}}
    run["metadata"]["name"] = "run"
    return [template, run, *embedded(template)]


def parse(command: str, builds: dict[str, tuple[dict[str, Any], ...]], layers: dict[str, str]):
    """One shell command as a Step (None: nothing this module reads). ``layers`` maps
    ``configs/cluster/<path>/`` to the name of its build in ``builds``."""
    text = re.sub(r"\s+#\s.*$", "", command).strip()
    ignores = bool(re.search(r"\|\|\s*true$", text))
    text = re.sub(r"\s*\|\|\s*true$", "", text)
    words = shlex.split(text)
    if "--render-runtime" in words and "kubectl" in words and "apply" in words:
        config, sets = _flow_args(words)
        return Step(text, (rendered_runtime(config, sets),), ignores_failure=ignores)
    if is_python(words[:1]) and words[1:2] == ["flows/cifar.py"] and "--submit" in words:
        config, sets = _flow_args(words)
        objects = submitted(config, sets, "--cron" in words)
        wanted = None
        if any(o["kind"] == "TrainJob" for o in objects):
            wanted = rendered_runtime(config, sets)
        return Step(text, tuple(objects), runtime_wanted=wanted)
    if words[:1] != ["kubectl"]:
        return None
    if "apply" in words:
        if "-k" in words:
            path = words[words.index("-k") + 1]
            return Step(text, builds[layers[path]], ignores_failure=ignores)
        if "-f" in words and words[words.index("-f") + 1] == CERT_MANAGER_FILE:
            return Step(text, builds["cert-manager"], ignores_failure=ignores)
        return None
    targets = [w for w in words[1:] if "/" in w and not w.startswith("-")]
    if "wait" in words and ESTABLISHED_WAIT in [w.lower() for w in words]:
        if "crd" in words and "--all" in words:
            return Step(text, established=frozenset([ALL]))
        names = frozenset(t.split("/", 1)[1] for t in targets if t.startswith("crd/"))
        return Step(text, established=names)
    if "wait" in words and CA_BUNDLE_WAIT in words:
        return Step(text, injected=frozenset(tuple(t.split("/", 1)) for t in targets))
    if "rollout" in words and words[words.index("rollout") + 1 :][:1] == ["status"]:
        namespace = words[words.index("-n") + 1] if "-n" in words else "default"
        kinds = ("deploy", "deployment", "deployments")
        deploys = [t.split("/", 1)[1] for t in targets if t.split("/", 1)[0] in kinds]
        return Step(text, rolled_out=frozenset((namespace, d) for d in deploys))
    return None


def steps(commands: list[str], builds, layers: dict[str, str]) -> list[Step]:
    found = [parse(c, builds, layers) for c in commands]
    return [s for s in found if s is not None]


def _matches(hook: dict[str, Any], group: str, plural: str) -> bool:
    for rule in hook.get("rules", []):
        groups, resources = rule.get("apiGroups", []), rule.get("resources", [])
        operations = rule.get("operations", ["*"])
        if not ({"*", "CREATE", "UPDATE"} & set(operations)):
            continue
        if ("*" in groups or group in groups) and ({"*", "*/*", plural} & set(resources)):
            return True
    return False


def _servers(install: Install, hook: dict[str, Any]) -> list[tuple[str, str]]:
    """The Deployments behind a webhook's Service: (namespace, name)."""
    ref = hook["clientConfig"].get("service")
    if ref is None:
        return []
    service = install.services.get((ref["namespace"], ref["name"]))
    if service is None:
        return [("?", f"the Service {ref['namespace']}/{ref['name']}")]
    selector = service["spec"].get("selector") or {}
    return [
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in install.deployments
        if d["metadata"].get("namespace") == ref["namespace"]
        and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ]


def _record(install: Install, i: int, obj: dict[str, Any]) -> None:
    kind, meta = obj["kind"], obj.get("metadata", {})
    if kind == "CustomResourceDefinition":
        install.crds[(obj["spec"]["group"], obj["spec"]["names"]["kind"])] = obj
        install.crd_at.setdefault(meta["name"], i)
    elif kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        known = {(o["kind"], o["metadata"]["name"]) for _, o in install.hooks}
        if (kind, meta["name"]) not in known:
            install.hooks.append((i, obj))
    elif kind == "Service":
        install.services[(meta.get("namespace"), meta["name"])] = obj
    elif kind == "Deployment":
        install.deployments.append(obj)


def problems(found: list[Step], crd_universe: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """Why an object of ``found`` would be refused, one line each (empty: none).
    ``crd_universe``: every CRD of the install, so that a kind served by a CRD nobody
    applies is told from a built-in kind."""
    install, out = Install(), []

    def waited(since: int, until: int, test) -> bool:
        return any(test(found[m]) for m in range(since + 1, until))

    for i, step in enumerate(found):
        if step.ignores_failure and step.applied:
            out.append(f"{step.command!r}: its failure is ignored (|| true)")
        for obj in step.applied:
            _record(install, i, obj)
        for obj in step.applied:
            meta = obj.get("metadata", {})
            name = meta.get("name") or f"{meta.get('generateName')}..."
            what = f"{obj['kind']} {name} ({step.command!r})"
            crd = crd_universe.get((group_of(obj), obj["kind"]))
            if crd is None:
                continue
            crd_name, plural = crd["metadata"]["name"], crd["spec"]["names"]["plural"]
            at = install.crd_at.get(crd_name)
            if at is None:
                out.append(f"{what}: no earlier command applies the CRD {crd_name}")
            elif at == i:
                out.append(f"{what}: its CRD {crd_name} comes in the same command")
            elif not waited(
                at, i, lambda s, n=crd_name: ALL in s.established or n in s.established
            ):
                out.append(f"{what}: nothing waits for the CRD {crd_name} to be Established")
            for at_hook, config in install.hooks:
                for hook in config["webhooks"]:
                    if hook.get("failurePolicy", "Fail") != "Fail":
                        continue
                    if not _matches(hook, group_of(obj), plural):
                        continue
                    label = f"{config['kind']} {config['metadata']['name']}"
                    if at_hook == i:
                        out.append(f"{what}: {label} comes in the same command")
                        continue
                    for server in _servers(install, hook) or [("?", "no Deployment")]:
                        if not waited(at_hook, i, lambda s, d=server: d in s.rolled_out):
                            out.append(f"{what}: {label} answers once {server[1]} is rolled out")
                    annotations = config["metadata"].get("annotations") or {}
                    key = (config["kind"].lower(), config["metadata"]["name"])
                    if set(CA_INJECTION) & set(annotations) and not waited(
                        at_hook, i, lambda s, k=key: k in s.injected
                    ):
                        out.append(f"{what}: nothing waits for cert-manager to inject {label}'s CA")
        for obj in step.applied:
            install.state[(obj["kind"], obj.get("metadata", {}).get("name"))] = obj
        if step.runtime_wanted is not None:
            key = ("ClusterTrainingRuntime", step.runtime_wanted["metadata"]["name"])
            if install.state.get(key) != step.runtime_wanted:
                have = "none" if key not in install.state else "one rendered from another config"
                out.append(
                    f"{step.command!r}: its TrainJob runs on {key[1]}, and the cluster has {have}"
                )
    return out


E2E = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "e2e.yml"


def e2e_commands(launcher: str) -> list[str]:
    """The shell lines of e2e.yml's job for one matrix launcher, in order: a step whose
    ``if`` names another launcher is left out, continuation lines joined."""
    workflow = yaml.safe_load(E2E.read_text())
    commands = []
    for step in workflow["jobs"]["kind"]["steps"]:
        condition = step.get("if", "")
        if "run" not in step or ("matrix.launcher ==" in condition and launcher not in condition):
            continue
        for line in step["run"].replace("\\\n", " ").splitlines():
            line = line.strip().replace('"$LAUNCHER"', launcher).replace("$LAUNCHER", launcher)
            if line and not line.startswith("#"):
                commands.append(line)
    return commands
