"""Who submits through the argo-server (issue 38 item 6): it runs in client mode, so every
request carries the caller's bearer token and the server acts with the caller's RBAC
(Argo v4.0.5 docs/argo-server-auth-mode.md; server/auth/gatekeeper.go getClients, case
Client). The install's submitter account (configs/cluster/pipeline/submitter-rbac.yaml)
may make every Kubernetes request the server makes for the flow's own requests, and for
``argo logs`` and the UI's lists, and nothing else; docs/cluster.md, the README and
e2e.yml make its token, as docs/access-token.md makes one, before they submit.

The flow's requests are recorded from real ``--submit --wait`` and ``--cron --submit``
runs against tests/helpers/fake_argo.py's stand-in server; what the server does with each
is read from Argo v4.0.5 (cited at ``SERVER``). Only a cluster proves the token reaches the
server: e2e.yml submits with it on kind.
"""

from __future__ import annotations

import re
import shlex

import pytest

from flows import cifar
from flows.cli import main as cli
from steps.common.config import load_config
from tests.helpers import admission_policies as ap
from tests.helpers import argo_restrictions
from tests.helpers import cluster_build as cb
from tests.helpers import k8s_refs as refs
from tests.helpers.cluster_install_steps import cluster_commands, e2e_commands, quick_start_commands
from tests.helpers.fake_argo import CLUSTER_READY, SMOKE, FakeArgo
from tests.helpers.k8s_rbac import Rbac, Request, ServiceAccount

pytestmark = pytest.mark.filterwarnings("ignore:The `json` method is deprecated")
NAMESPACE = "argo"
SUBMITTER = ServiceAccount(NAMESPACE, "cifar-pipeline-submitter")
ARGO = "argoproj.io"
# Argo v4.0.5, client mode: the Kubernetes requests the server makes with the caller's
# client for each API call (method, route) the flow sends.
#   server/workflow/workflow_server.go CreateWorkflow: Workflows(ns).Create (the
#     WorkflowTemplate it refers to is read from the server's informer, its own account);
#     GetWorkflow: getWorkflow -> Workflows(ns).Get
#   server/workflowtemplate/workflow_template_server.go GetWorkflowTemplate: auth.CanI
#     "get"; Create...: WorkflowTemplates(ns).Create; Update...: .Update
#   server/cronworkflow/cron_workflow_server.go GetCronWorkflow: CronWorkflows(ns).Get;
#     Create...: .Create; Update...: .Update
SERVER = {  # (method, kind of route, a named object?) -> the Kubernetes requests
    ("POST", "workflows", False): [("create", ARGO, "workflows")],
    ("GET", "workflows", True): [("get", ARGO, "workflows")],
    ("GET", "workflow-templates", True): [("get", ARGO, "workflowtemplates")],
    ("POST", "workflow-templates", False): [("create", ARGO, "workflowtemplates")],
    ("PUT", "workflow-templates", True): [("update", ARGO, "workflowtemplates")],
    ("GET", "cron-workflows", True): [("get", ARGO, "cronworkflows")],
    ("POST", "cron-workflows", False): [("create", ARGO, "cronworkflows")],
    ("PUT", "cron-workflows", True): [("update", ARGO, "cronworkflows")],
}
# `argo logs @latest -c pytorch` (docs/cluster.md step 6), -f to follow: getLatestWorkflow
# lists the workflows; PodLogs gets it; util/logs/workflow-logger.go WorkflowLogs lists and
# watches its pods, streams each pod's log, and watches the workflow.
LOGS = [
    ("list", ARGO, "workflows"),
    ("get", ARGO, "workflows"),
    ("watch", ARGO, "workflows"),
    ("list", "", "pods"),
    ("watch", "", "pods"),
    ("get", "", "pods/log"),
]
# The UI's lists (docs/security.md "UI Access" names the same), and a pod's details.
UI = [
    (verb, ARGO, resource)
    for resource in ("workflows", "workflowtemplates", "cronworkflows")
    for verb in ("list", "watch")
] + [("get", "", "pods")]
ROUTE = re.compile(
    r"/api/v1/(workflows|workflow-templates|cron-workflows)/[^/?]+(/[^/?]+)?(/[^/?]+)?(?:\?.*)?"
)


def install() -> Rbac:
    return Rbac(cb.own_objects())


def flow_requests(fake: FakeArgo) -> set[tuple[str, str, str]]:
    """The Kubernetes requests the server makes for what the flow sent it; a request this
    mapping does not know (a new verb of the flow) fails here: read what Argo's server does
    for it, add it to SERVER, and to the Role if the submitter needs more."""
    found = set()
    for request in fake.requests:
        match = ROUTE.fullmatch(request["path"])
        assert match and not match.group(3), f"not mapped: {request['method']} {request['path']}"
        key = (request["method"], match.group(1), bool(match.group(2)))
        assert key in SERVER, f"not mapped: {request['method']} {request['path']}"
        found |= set(SERVER[key])
    return found


def test_the_submitter_may_submit_follow_and_schedule_the_pipeline(argo: FakeArgo) -> None:
    """Every request of a first and a second --submit --wait (the template created, then
    updated) and of --cron --submit is one the server may make for the submitter."""
    args = ["--config", SMOKE, *CLUSTER_READY]
    for _ in range(2):
        assert cli.main([*args, "--submit", "--wait"], cifar) == 0
    assert cli.main([*args, "--cron", "--submit"], cifar) == 0
    needed = flow_requests(argo)
    assert {verb for verb, _, _ in needed} == {"create", "get", "update"}
    rbac = install()
    for verb, group, resource in sorted(needed | set(LOGS) | set(UI)):
        request = Request(verb, group, resource, NAMESPACE)
        assert rbac.allows(SUBMITTER, request), (verb, resource)


BODY = {"workflows": "workflow", "workflow-templates": "template", "cron-workflows": "cronWorkflow"}


def test_what_the_flow_sends_is_admitted_for_the_submitter(argo: FakeArgo) -> None:
    """What the server writes with the submitter's token for a --submit, a second one
    (the WorkflowTemplate updated over the first) and --cron --submit passes the admission
    policy on workflows (configs/cluster/pipeline/admission-policy-workflows.yaml), and each
    run is a reference that Argo's Strict templateReferencing runs."""
    args = ["--config", SMOKE, *CLUSTER_READY]
    for _ in range(2):
        assert cli.main([*args, "--submit"], cifar) == 0
    assert cli.main([*args, "--cron", "--submit"], cifar) == 0
    cfg = load_config(SMOKE, [a for a in CLUSTER_READY if a != "--set"])
    vap, _ = ap.policy(ap.WORKFLOWS)
    user = SUBMITTER.username
    sent, last = [], {}
    for request in argo.requests:
        kind = ROUTE.fullmatch(request["path"]).group(1)
        if request["method"] in ("POST", "PUT"):
            obj = request["body"][BODY[kind]]
            name = (kind, obj["metadata"].get("name"))
            operation = "UPDATE" if request["method"] == "PUT" else "CREATE"
            old = last.get(name) if operation == "UPDATE" else None
            found = ap.refusals(
                vap, obj, ap.params_of(cfg), user, groups=tuple(SUBMITTER.groups),
                operation=operation, old=old,
            )  # fmt: skip
            assert found == [], (request["method"], kind, found)
            last[name] = obj
            sent.append((operation, obj["kind"]))
            if obj["kind"] != "WorkflowTemplate":
                spec = obj["spec"] if obj["kind"] == "Workflow" else obj["spec"]["workflowSpec"]
                assert argo_restrictions.override_violations(spec) == []
                assert "workflowTemplateRef" in spec
    assert sorted(set(sent)) == [
        ("CREATE", "CronWorkflow"),
        ("CREATE", "Workflow"),
        ("CREATE", "WorkflowTemplate"),
        ("UPDATE", "WorkflowTemplate"),
    ]


def test_the_submitter_may_do_nothing_more() -> None:
    """Its grants are exactly those requests: no Secrets, no pods of its own, no jobs or
    services the admission policy watches, no stopping or deleting others' runs, nothing
    in another namespace or cluster-wide."""
    needed = {(g, r, v) for v, g, r in (*LOGS, *UI)}
    needed |= {(g, r, v) for requests in SERVER.values() for v, g, r in requests}
    rbac = install()
    assert rbac.grants(SUBMITTER, NAMESPACE) == needed
    assert rbac.cluster_bindings_of(SUBMITTER) == []
    for request in (
        Request("get", "", "secrets", NAMESPACE, "cifar-s3"),
        Request("create", "", "pods", NAMESPACE),
        Request("create", "kubeflow.org", "pytorchjobs", NAMESPACE),
        Request("create", "serving.kserve.io", "inferenceservices", NAMESPACE),
        Request("delete", ARGO, "workflows", NAMESPACE, "cifar-pipeline-x"),
        Request("create", ARGO, "workflows", "default"),
    ):
        assert not rbac.allows(SUBMITTER, request), request


def test_the_submitter_account_mounts_no_token_in_any_pod() -> None:
    (account,) = [
        d
        for d in cb.own_objects()
        if refs.key_of(d) == ("ServiceAccount", NAMESPACE, SUBMITTER.name)
    ]
    assert account["automountServiceAccountToken"] is False


def token_account(command: str) -> str | None:
    """The account whose token a command puts in ARGO_TOKEN (``kubectl create token``)."""
    if not command.startswith("export ARGO_TOKEN="):
        return None
    inner = re.fullmatch(r'export ARGO_TOKEN="Bearer \$\((kubectl [^)]*)\)"', command)
    assert inner, f"ARGO_TOKEN must be 'Bearer <token>' (Argo docs/access-token.md): {command}"
    words = shlex.split(inner.group(1))
    assert words[:2] == ["kubectl", "-n"] and words[3:5] == ["create", "token"], command
    assert words[2] == NAMESPACE, command
    return words[5]


SEQUENCES = {
    "docs-cluster": cluster_commands,
    "readme": quick_start_commands,
    "e2e-pytorchjob": lambda: e2e_commands("pytorchjob"),
    "e2e-trainjob": lambda: e2e_commands("trainjob"),
}


@pytest.mark.parametrize("sequence", SEQUENCES)
def test_every_guide_makes_the_submitters_token_before_it_submits(sequence: str) -> None:
    """The install's argo-server is in client mode: a submit without a token is refused
    (401). docs/cluster.md, the README's quick start and e2e.yml make the submitter's token
    before their first submit, the same command in each."""
    commands = [re.sub(r"\s+#\s.*$", "", c) for c in SEQUENCES[sequence]()]
    submits = [i for i, c in enumerate(commands) if "flows/cifar.py" in c and "--submit" in c]
    tokens = [i for i, c in enumerate(commands) if token_account(c)]
    assert submits and tokens and tokens[0] < submits[0], commands
    assert {token_account(commands[i]) for i in tokens} == {SUBMITTER.name}
    guide = [c for c in cluster_commands() if token_account(c)]
    assert {commands[i] for i in tokens} == set(guide)
