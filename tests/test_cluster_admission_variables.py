"""The admission policy's variables as the API server composes them (KEP-3488): each refers
only to variables before it, the evaluator shows a variable only those, no validation walks
the pod specs itself, and a variable's error is the error of each validation that reads it."""

from __future__ import annotations

import copy
import re
from typing import Any

import celpy
import celpy.evaluation

from tests.helpers.admission_policies import Variables, evaluate, params_of, referred
from tests.helpers.admission_workloads import base, policy, refusals

# --- the variables, as the API server composes them --------------------------------------


def test_each_variable_refers_only_to_variables_before_it() -> None:
    vap, _ = policy()
    seen: set[str] = set()
    for variable in vap["spec"]["variables"]:
        assert referred(variable["expression"]) <= seen, variable["name"]
        seen.add(variable["name"])
    for validation in vap["spec"]["validations"]:
        assert referred(validation["expression"]) <= seen


def test_the_evaluator_shows_a_variable_only_those_before_it() -> None:
    definitions = [
        {"name": "early", "expression": "variables.late + 1"},
        {"name": "late", "expression": "1"},
    ]
    activation: dict[str, Any] = {}
    variables = Variables(definitions, activation)
    activation["variables"] = variables
    assert evaluate("variables.late", activation) == 1
    assert isinstance(variables["early"], celpy.CELEvalError)


def test_no_validation_walks_the_pod_specs_itself() -> None:
    """Where each kind keeps its pod specs and containers is said once, in the variables;
    the rules read variables.podSpecs, variables.containers or what is made of them. Only
    the rules on a kind's own fields (a TrainJob's runtime and patches, a predictor's
    runtimes) read object.spec."""
    vap, _ = policy()
    walks = re.compile(
        r"pytorchReplicaSpecs|replicatedJobs|(?<!variables)\.containers|initContainers"
        r"|securityContext|\.predictor\.volumes"
    )
    validations = vap["spec"]["validations"]
    for validation in validations:
        assert not walks.search(validation["expression"]), validation["message"]
    readers = [v for v in validations if referred(v["expression"])]
    kinds_own = [v for v in validations if "object.spec" in v["expression"]]
    assert len(readers) == 10 and len(kinds_own) == 3
    assert not [v for v in validations if v in readers and v in kinds_own]


def depends_on(name: str) -> set[str]:
    """The variables that read ``name``, directly or through others, and ``name``."""
    vap, _ = policy()
    found = {name}
    for variable in vap["spec"]["variables"]:
        if referred(variable["expression"]) & found:
            found.add(variable["name"])
    return found


def test_a_variables_error_is_the_error_of_each_validation_that_reads_it() -> None:
    """A replica without a pod spec: podSpecs errs, and so does every validation that
    reads it (or a variable made of it), each refusing; the others still hold."""
    cfg, job = base("PyTorchJob")
    job = copy.deepcopy(job)
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    vap, _ = policy()
    readers = [
        v["message"]
        for v in vap["spec"]["validations"]
        if referred(v["expression"]) & depends_on("podSpecs")
    ]
    found = refusals(job, params_of(cfg))
    assert len(found) == len(readers) >= 8
    assert all(m.startswith("error") and "spec" in m for m in found), found
