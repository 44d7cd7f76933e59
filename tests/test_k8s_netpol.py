"""The NetworkPolicy evaluator (tests/helpers/k8s_netpol.py) on the Kubernetes
documentation's examples: one peer's selectors ANDed, two ORed, the default policies, port
ranges and named ports, host-network pods as their node."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers.k8s_netpol import Cluster, Pod

# --- the evaluator on the upstream doc's examples ---------------------------------------

DOC_POLICY = {  # "An example NetworkPolicy might look like this"
    "metadata": {"name": "test-network-policy", "namespace": "default"},
    "spec": {
        "podSelector": {"matchLabels": {"role": "db"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {
                "from": [
                    {"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}},
                    {"namespaceSelector": {"matchLabels": {"project": "myproject"}}},
                    {"podSelector": {"matchLabels": {"role": "frontend"}}},
                ],
                "ports": [{"protocol": "TCP", "port": 6379}],
            }
        ],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"port": 5978}]}],
    },
}
DB = Pod("default", "db", {"role": "db"}, ip="10.1.0.5")
FRONTEND = Pod("default", "frontend", {"role": "frontend"}, ip="10.1.0.6")
OTHER = Pod("default", "other", {"role": "other"}, ip="10.1.0.7")
MYPROJECT = Pod("mine", "any", {}, ip="10.1.0.8")
ELSEWHERE = Pod("elsewhere", "frontend", {"role": "frontend"}, ip="10.1.0.9")
NAMESPACES = {"default": {}, "mine": {"project": "myproject"}, "elsewhere": {"user": "alice"}}


@pytest.mark.parametrize(
    ("source", "destination", "port", "allowed"),
    [
        (FRONTEND, DB, 6379, True),  # a role=frontend pod of "default"
        (MYPROJECT, DB, 6379, True),  # any pod of a project=myproject namespace
        ("172.17.0.9", DB, 6379, True),  # 172.17.0.0/16 ...
        ("172.17.1.9", DB, 6379, False),  # ... except 172.17.1.0/24
        ("172.17.2.1", DB, 6379, True),
        (OTHER, DB, 6379, False),  # isolated: nothing else
        (ELSEWHERE, DB, 6379, False),  # podSelector alone: the policy's namespace only
        (FRONTEND, DB, 6380, False),  # that one port
        (DB, "10.0.0.7", 5978, True),  # egress: 10.0.0.0/24 on 5978 only
        (DB, "10.0.0.7", 5979, False),
        (DB, "10.0.1.7", 5978, False),
        (DB, FRONTEND, 80, False),  # db's egress is isolated too
        (FRONTEND, OTHER, 80, True),  # pods no policy selects are not isolated
    ],
)
def test_the_evaluator_reads_the_docs_example(source, destination, port, allowed) -> None:
    assert Cluster(NAMESPACES, [DOC_POLICY]).allows(source, destination, port) is allowed


def _ingress_from(*peers: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "podSelector": {"matchLabels": {"role": "db"}},
            "ingress": [{"from": list(peers)}],
        },
    }


ALICE_CLIENT = Pod("elsewhere", "client", {"role": "client"}, ip="10.1.0.10")
ALICE_OTHER = Pod("elsewhere", "x", {}, ip="10.1.0.11")
LOCAL_CLIENT = Pod("default", "client", {"role": "client"}, ip="10.1.0.12")
ALICE = {"namespaceSelector": {"matchLabels": {"user": "alice"}}}
CLIENT = {"podSelector": {"matchLabels": {"role": "client"}}}


@pytest.mark.parametrize(
    ("peers", "source", "allowed"),
    [  # "Behavior of to and from selectors": one element ANDs, two elements OR
        ([{**ALICE, **CLIENT}], ALICE_CLIENT, True),
        ([{**ALICE, **CLIENT}], ALICE_OTHER, False),
        ([{**ALICE, **CLIENT}], LOCAL_CLIENT, False),
        ([ALICE, CLIENT], ALICE_OTHER, True),
        ([ALICE, CLIENT], LOCAL_CLIENT, True),
        ([ALICE, CLIENT], OTHER, False),
    ],
)
def test_the_evaluator_ands_one_peer_and_ors_two(peers, source, allowed) -> None:
    assert Cluster(NAMESPACES, [_ingress_from(*peers)]).allows(source, DB, 6379) is allowed


def _deny(types: list[str] | None, **rules: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {}, **rules}
    if types is not None:
        spec["policyTypes"] = types
    return {"metadata": {"name": "d", "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize(
    ("policy", "ingress", "egress"),
    [  # "Default policies"
        (_deny(["Ingress"]), False, True),  # default deny all ingress
        (_deny(None, ingress=[{}]), True, True),  # allow all ingress
        (_deny(["Egress"]), True, False),  # default deny all egress
        (_deny(None, egress=[{}], ingress=[{}]), True, True),  # allow all egress (+ ingress)
        (_deny(["Ingress", "Egress"]), False, False),  # default deny all
        (_deny(None, egress=[]), False, False),  # an egress section: both types implied
    ],
)
def test_the_evaluator_reads_the_default_policies(policy, ingress, egress) -> None:
    cluster = Cluster(NAMESPACES, [policy])
    assert cluster.allows(MYPROJECT, DB, 80) is ingress
    assert cluster.allows(DB, MYPROJECT, 80) is egress


def test_the_evaluator_reads_port_ranges_and_named_ports() -> None:
    """ "Targeting a range of ports" (endPort), and a named port as the destination pod
    declares it."""
    ranged = _deny(
        ["Egress"], egress=[{"ports": [{"protocol": "TCP", "port": 32000, "endPort": 32768}]}]
    )
    named = _ingress_from()
    named["spec"]["ingress"][0]["ports"] = [{"port": "redis"}]
    db = Pod("default", "db", {"role": "db"}, ports={("redis", "TCP"): 6379})
    cluster = Cluster(NAMESPACES, [ranged, named])
    assert cluster.allows(OTHER, "10.0.0.1", 32768) and not cluster.allows(OTHER, "10.0.0.1", 32769)
    assert cluster.allows(FRONTEND, db, 6379) is False  # frontend's egress: the range only
    assert Cluster(NAMESPACES, [named]).allows(FRONTEND, db, 6379)
    assert not Cluster(NAMESPACES, [named]).allows(FRONTEND, db, 6380)
    assert not Cluster(NAMESPACES, [named]).allows(FRONTEND, db, 6379, "UDP")


def test_the_evaluator_treats_host_network_pods_as_their_node() -> None:
    host = Pod("default", "host", {"role": "frontend"}, host_network=True, node_ip="172.18.0.4")
    by_label = Cluster(NAMESPACES, [DOC_POLICY])
    assert not by_label.allows(host, DB, 6379)  # no selector matches it: it is its node
    node_block = copy.deepcopy(DOC_POLICY)
    node_block["spec"]["ingress"][0]["from"].append({"ipBlock": {"cidr": "172.18.0.0/16"}})
    assert Cluster(NAMESPACES, [node_block]).allows(host, DB, 6379)
    assert Cluster(NAMESPACES, [DOC_POLICY]).allows(DB, host, 1) is False  # db's egress
    assert Cluster(NAMESPACES, []).allows(OTHER, host, 1)  # no policy isolates it
