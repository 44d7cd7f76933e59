"""What may run in the pipeline's namespace (issue 38): the install's ValidatingAdmissionPolicy
on Workflows, WorkflowTemplates and CronWorkflows (configs/cluster/pipeline/
admission-policy-workflows.yaml), evaluated with cel-python as the API server evaluates it
(tests/helpers/admission_policies.py), together with the workflow controller's templateReferencing:
Strict (evaluated as Argo v4.0.5 applies it, tests/helpers/argo_restrictions.py).

Every WorkflowTemplate, Workflow and CronWorkflow the pipeline renders (every config, both
launchers, the RDMA, host-network and PVC variants) is admitted with its config's
parameters, created and updated by the submitter; each hostile variant is refused with its
message; and for each way a Workflow could run a pod as another account, one of the two
layers stops it, the table saying which.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy.evaluation
import pytest
import yaml

from tests.helpers import admission_policies as ap
from tests.helpers import cluster_build as cb
from tests.helpers.admission_policies import params_of, referred
from tests.helpers.admission_workflows import (
    ACCOUNTS,
    FOREIGN,
    NAMESPACE,
    SUBMITTER,
    Change,
    config,
    hostile_template,
    policy,
    refusals,
    rendered,
    template_of,
)
from tests.helpers.config_cases import CONFIG_VARIANTS, RDMA_ON_HOST_NETWORK, launcher_cases
from tests.helpers.k8s_rbac import Rbac, Request, ServiceAccount

CASES = launcher_cases(
    [*CONFIG_VARIANTS, RDMA_ON_HOST_NETWORK, ("cluster", ["cluster.pvc=cifar-data"])]
)


@pytest.mark.parametrize(("name", "sets"), CASES)
def test_every_rendered_workflow_is_admitted(name: str, sets: list[str]) -> None:
    cfg = config(name, *sets)
    for obj in rendered(cfg):
        assert refusals(obj, params_of(cfg)) == [], obj["kind"]
        # --submit again: the template and the CronWorkflow updated in place
        older = copy.deepcopy(obj)
        older["metadata"].setdefault("annotations", {})["cifar-pipeline/git-revision"] = "old"
        assert refusals(obj, params_of(cfg), operation="UPDATE", old=older) == []


def test_the_policy_watches_what_runs_in_the_pipelines_namespace() -> None:
    vap, binding = policy()
    workloads, workloads_binding = ap.policy(ap.WORKLOADS)
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    # the same parameters as the jobs' policy, and no parameters refuses everything
    assert binding["spec"]["paramRef"] == workloads_binding["spec"]["paramRef"]
    assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Deny"
    assert vap["spec"]["paramKind"] == workloads["spec"]["paramKind"]
    (rule,) = vap["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["argoproj.io"]
    assert set(rule["resources"]) == {"workflows", "workflowtemplates", "cronworkflows"}
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    selector = vap["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"]
    assert selector == {"kubernetes.io/metadata.name": config().cluster.namespace}
    top = yaml.safe_load((cb.CLUSTER / "kustomization.yaml").read_text())
    assert "pipeline/admission-policy-workflows.yaml" in top["resources"]


@pytest.mark.parametrize(
    ("who", "groups", "concerned"),
    [
        pytest.param(SUBMITTER, (), True, id="the-submitter"),
        pytest.param("system:serviceaccount:argo:argo-server", (), True, id="argo-server"),
        pytest.param("alice@example.com", ("system:authenticated",), True, id="a-user"),
        pytest.param(cb.CONTROLLER.username, cb.CONTROLLER.groups, False, id="the-controller"),
        pytest.param("kubernetes-admin", ("system:masters",), False, id="an-administrator"),
    ],
)
def test_whom_the_policy_bounds(who: str, groups: tuple[str, ...], concerned: bool) -> None:
    """Everyone but the workflow controller (it writes every Workflow's status and creates
    the CronWorkflows' runs from a spec admitted here) and the cluster's administrators
    (who may run any pod anyway); the argo-server's account too, as in the single-user
    overlay's server mode it acts for whoever reaches it."""
    cfg = config()
    found = refusals(hostile_template(cfg), params_of(cfg), user=who, groups=groups)
    assert bool(found) is concerned, found


def test_an_update_of_metadata_alone_is_not_the_policys_concern() -> None:
    """Labels, finalizers, the garbage collector's updates change nothing that runs: an
    object that predates the policy stays updatable; a change to its spec does not pass."""
    cfg = config()
    old = hostile_template(cfg)
    labelled = copy.deepcopy(old)
    labelled["metadata"]["labels"]["team"] = "a"
    labelled["metadata"]["finalizers"] = ["example.com/keep"]
    assert refusals(labelled, params_of(cfg), operation="UPDATE", old=old) == []
    changed = copy.deepcopy(labelled)
    changed["spec"]["archiveLogs"] = False
    assert refusals(changed, params_of(cfg), operation="UPDATE", old=old)


# --- hostile WorkflowTemplates -----------------------------------------------------------


def named(spec: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [t for t in spec["templates"] if t["name"] == name]
    return found


def dag_task(spec: dict[str, Any], name: str = "stage") -> dict[str, Any]:
    (task,) = [k for k in named(spec, "pipeline")["dag"]["tasks"] if k["name"] == name]
    return task


def script(image: str) -> dict[str, Any]:
    return {
        "name": "evil",
        "automountServiceAccountToken": False,
        "script": {"image": image, "command": ["sh"], "source": "cat /var/run/secrets/*"},
    }


def resource(manifest: str, action: str = "create") -> dict[str, Any]:
    return {"name": "evil", "resource": {"action": action, "manifest": manifest}}


POD = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: []\n"
SECRET_READER = (
    "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: reader\n"
    "rules:\n- apiGroups: ['']\n  resources: [secrets]\n  verbs: [get, list]\n"
)
JOB = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: x\nspec:\n  a: 1\n"
PATCH = "no podSpecPatch"
IMAGES = "every container image must be under the configured registry"
TOKEN = "mounts no token of its account"
MANIFEST = "a resource template acts on one PyTorchJob, TrainJob or InferenceService"
CALLS = "a task or step calls a template by name with parameters only"
KINDS = "a template is a container, script, resource, dag, steps or suspend template"
SECURITY = "no privileged container, privilege escalation or added capability"


def _container(s: dict[str, Any]) -> dict[str, Any]:
    return named(s, "stage")["container"]


def _context(s: dict[str, Any]) -> dict[str, Any]:
    return _container(s).setdefault("securityContext", {})


HOSTILE: dict[str, tuple[Change, str]] = {
    "another account on the spec": (
        lambda s: s.update(serviceAccountName=FOREIGN),
        ACCOUNTS,
    ),
    "another account on a template": (
        lambda s: named(s, "train").update(serviceAccountName=FOREIGN),
        ACCOUNTS,
    ),
    "another account in templateDefaults": (
        lambda s: s.update(templateDefaults={"serviceAccountName": FOREIGN}),
        ACCOUNTS,
    ),
    "artifact GC as another account": (
        lambda s: s["artifactGC"].update(serviceAccountName=FOREIGN),
        ACCOUNTS,
    ),
    "an output artifact's GC as another account": (
        lambda s: named(s, "benchmark")["outputs"]["artifacts"][0]["artifactGC"].update(
            serviceAccountName=FOREIGN
        ),
        ACCOUNTS,
    ),
    "the executor as another account": (
        lambda s: named(s, "stage")["executor"].update(serviceAccountName=FOREIGN),
        "the executor runs as the pipeline's executor account",
    ),
    "a podSpecPatch adding hostPath": (
        lambda s: named(s, "stage").update(
            podSpecPatch='{"volumes":[{"name":"h","hostPath":{"path":"/"}}]}'
        ),
        PATCH,
    ),
    "a podSpecPatch making the pod privileged": (
        lambda s: s.update(
            podSpecPatch='{"containers":[{"name":"main","securityContext":{"privileged":true}}]}'
        ),
        PATCH,
    ),
    "an artifact GC podSpecPatch": (
        lambda s: s["artifactGC"].update(podSpecPatch='{"serviceAccountName":"argo-server"}'),
        PATCH,
    ),
    "a foreign image": (lambda s: _container(s).update(image="docker.io/evil/miner:1"), IMAGES),
    "a look-alike registry": (
        lambda s: _container(s).update(image="ghcr.io/cifar-pipeline.evil.io/cifar-data:1"),
        IMAGES,
    ),
    "a parameter for an image": (
        lambda s: _container(s).update(image="{{workflow.parameters.image}}"),
        IMAGES,
    ),
    "a script template running a foreign image": (
        lambda s: s["templates"].append(script("docker.io/library/busybox")),
        IMAGES,
    ),
    "a foreign sidecar": (
        lambda s: named(s, "stage").update(sidecars=[{"name": "x", "image": "busybox"}]),
        IMAGES,
    ),
    "a foreign init container": (
        lambda s: named(s, "stage").update(initContainers=[{"name": "x", "image": "busybox"}]),
        IMAGES,
    ),
    "a foreign image in templateDefaults": (
        lambda s: s.update(
            templateDefaults={"automountServiceAccountToken": False, "container": {"image": "x"}}
        ),
        IMAGES,
    ),
    "a container template with the account's token": (
        lambda s: named(s, "stage").update(automountServiceAccountToken=True),
        TOKEN,
    ),
    "a sidecar beside a resource template's kubectl": (
        lambda s: named(s, "deploy").update(
            sidecars=[{"name": "x", "image": "ghcr.io/cifar-pipeline/cifar-serve:0.1.0"}]
        ),
        TOKEN,
    ),
    "a hostPath volume": (
        lambda s: s.update(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
        "no hostPath volume",
    ),
    "a template's hostPath volume": (
        lambda s: named(s, "stage").update(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
        "no hostPath volume",
    ),
    "hostNetwork": (lambda s: s.update(hostNetwork=True), "no hostNetwork"),
    "privileged": (lambda s: _context(s).update(privileged=True), SECURITY),
    "privilege escalation": (lambda s: _context(s).update(allowPrivilegeEscalation=True), SECURITY),
    "an added capability": (
        lambda s: _context(s).update(capabilities={"add": ["SYS_ADMIN"]}),
        SECURITY,
    ),
    "a root container": (
        lambda s: _context(s).update(runAsUser=0, runAsNonRoot=False),
        "no pod or container of the workflow runs as root",
    ),
    "a root pod": (
        lambda s: s["securityContext"].update(runAsUser=0),
        "no pod or container of the workflow runs as root",
    ),
    "a containerSet template": (
        lambda s: s["templates"].append({"name": "cs", "containerSet": {"containers": []}}),
        KINDS,
    ),
    "an http template": (
        lambda s: s["templates"].append({"name": "h", "http": {"url": "http://mlflow"}}),
        KINDS,
    ),
    "a plugin template": (lambda s: s["templates"].append({"name": "p", "plugin": {}}), KINDS),
    "an inline template in a task": (
        lambda s: dag_task(s).update(inline=script("ghcr.io/cifar-pipeline/cifar-data:0.1.0")),
        CALLS,
    ),
    "an artifact argument": (
        lambda s: (
            dag_task(s)
            .setdefault("arguments", {})
            .update(artifacts=[{"name": "manifest", "s3": {"key": "evil.yaml"}}])
        ),
        CALLS,
    ),
    "a lifecycle hook": (
        lambda s: s.update(hooks={"exit": {"template": "close-run"}}),
        CALLS,
    ),
    "a resource template creating a Pod": (
        lambda s: s["templates"].append(resource(POD)),
        MANIFEST,
    ),
    "a resource template creating a Secret reader Role": (
        lambda s: s["templates"].append(resource(SECRET_READER)),
        MANIFEST,
    ),
    "a second document after the job": (
        lambda s: s["templates"].append(resource(JOB + "---\n" + POD)),
        MANIFEST,
    ),
    "a second kind after the job's": (
        lambda s: s["templates"].append(resource(JOB + "kind: Pod\n")),
        MANIFEST,
    ),
    "a manifest from an artifact that is not its own": (
        lambda s: named(s, "train")["inputs"]["artifacts"][0].pop("raw"),
        MANIFEST,
    ),
    "a patch action": (
        lambda s: s["templates"].append(resource(JOB, action="patch")),
        "a resource template creates, applies or deletes",
    ),
    "a delete of Secrets": (
        lambda s: named(s, "rollback-delete")["resource"].update(flags=["secrets", "cifar-s3"]),
        "resource flags only on a delete without a manifest",
    ),
    "a kubectl flag impersonating": (
        lambda s: named(s, "rollback-delete")["resource"]["flags"].append("--as=admin"),
        "resource flags only on a delete without a manifest",
    ),
}


@pytest.mark.parametrize("what", HOSTILE)
def test_a_hostile_workflow_template_is_refused_with_its_message(what: str) -> None:
    cfg = config()
    template = template_of(cfg)
    change, message = HOSTILE[what]
    change(template["spec"])
    found = refusals(template, params_of(cfg))
    assert found and all(message in m for m in found), found
    # updated into the installed template: refused the same
    old = template_of(cfg)
    assert refusals(template, params_of(cfg), operation="UPDATE", old=old) == found


@pytest.mark.parametrize("launcher", ["pytorchjob", "trainjob"])
def test_the_manifest_rule_reads_each_kind_the_pipeline_makes(launcher: str) -> None:
    """The rule reads the rendered manifests (the train job's, the InferenceService's), not
    a text that happens to pass: each of the pipeline's, with its kind swapped, is refused."""
    cfg = config("cluster", f"train.launcher={launcher}")
    for name in ("train", "deploy", "rollback-apply"):
        template = template_of(cfg)
        raw = named(template["spec"], name)["inputs"]["artifacts"][0]["raw"]
        kind = yaml.safe_load(raw["data"].replace("{{", "").replace("}}", ""))["kind"]
        raw["data"] = raw["data"].replace(f"\nkind: {kind}\n", "\nkind: Pod\n", 1)
        (message,) = refusals(template, params_of(cfg))
        assert MANIFEST in message, name


def test_the_token_rule_follows_the_config() -> None:
    """The accounts are parameters: a config naming other accounts renders templates the
    install's parameters refuse and its own admit."""
    cfg = config("cluster", "cluster.service_account=team-a", "cluster.executor_service_account=x")
    template = template_of(cfg)
    assert refusals(template, params_of(cfg)) == []
    found = refusals(template, params_of(config()))
    assert len(found) == 2 and found[0].startswith(ACCOUNTS), found
    assert found[1].startswith("the executor runs as the pipeline's executor account"), found


# --- what a resource template's text cannot bound: RBAC -----------------------------------


def test_the_workflows_account_may_create_no_pod_role_or_secret() -> None:
    """At run time a resource template's kubectl acts with the workflow's account: whatever
    its manifest becomes (a run's parameters substituted), the account may create only the
    pipeline's kinds (pipeline/rbac.yaml), which admission-policy.yaml bounds in turn."""
    rbac = Rbac(cb.own_objects())
    account = ServiceAccount(NAMESPACE, config().cluster.service_account)
    for group, resource in (
        ("", "pods"),
        ("", "secrets"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("batch", "jobs"),
        ("argoproj.io", "workflows"),
        ("argoproj.io", "workflowtemplates"),
    ):
        assert not rbac.allows(account, Request("create", group, resource, NAMESPACE)), resource
    assert rbac.allows(account, Request("create", "kubeflow.org", "pytorchjobs", NAMESPACE))


# --- the expressions ----------------------------------------------------------------------


def test_the_expressions_call_only_functions_both_cel_environments_have() -> None:
    vap, _ = policy()
    assert ap.calls(vap) <= ap.CEL_MACROS | ap.CEL_FUNCTIONS
    assert set(celpy.evaluation.base_functions) >= ap.CEL_FUNCTIONS
    assert not [e for e in ap.expressions(vap) if ".?" in e or "[?" in e]  # no optional types


def test_each_variable_refers_only_to_variables_before_it() -> None:
    vap, _ = policy()
    seen: set[str] = set()
    for variable in vap["spec"]["variables"]:
        assert referred(variable["expression"]) <= seen, variable["name"]
        seen.add(variable["name"])
    for validation in vap["spec"]["validations"]:
        assert referred(validation["expression"]) <= seen
    for condition in vap["spec"]["matchConditions"]:
        assert not referred(condition["expression"])  # evaluated before any variable


def test_a_missing_required_field_errs_and_refuses() -> None:
    """A CronWorkflow without its workflowSpec: spec errs, and every rule reading it."""
    cfg = config()
    cron = rendered(cfg)[2]
    del cron["spec"]["workflowSpec"]
    found = refusals(cron, params_of(cfg))
    assert found and all(m.startswith("error") for m in found), found
