"""A small Kubernetes NetworkPolicy evaluator: may this pod (or address) open a connection to
that pod (or address) on this port, given the NetworkPolicies of a build?

It follows the API's semantics (kubernetes/website content/en/docs/concepts/
services-networking/network-policies.md; the types in k8s.io/api networking/v1 types.go):
- a pod is isolated for ingress (egress) once any policy of its namespace selects it with
  Ingress (Egress) among its policyTypes; an unisolated direction allows everything;
- policyTypes left out: Ingress always, Egress when the policy has an ``egress`` section;
- policies are additive: a connection is allowed when any selecting policy's rule allows
  it, and it needs both the source's egress and the destination's ingress;
- a rule matches when one of its peers and one of its ports match; no ``from``/``to``: every
  peer, no ``ports``: every port;
- a peer with only ``podSelector`` means pods of the policy's namespace, with only
  ``namespaceSelector`` every pod of the matching namespaces, with both the matching pods of
  the matching namespaces (one element: AND; two elements: OR); ``ipBlock`` a CIDR less its
  ``except`` ranges;
- a port is TCP unless it says otherwise; ``endPort`` makes a range; a named port matches
  the destination pod's container port of that name and protocol;
- a hostNetwork pod is no pod to NetworkPolicy: no policy isolates it and its traffic
  carries its node's address (the doc: behaviour for hostNetwork pods is undefined; in
  practice they are treated as node traffic), so pod and namespace selectors never match it.

Whether an ``ipBlock`` also matches pod addresses is left to the network plugin ("These
should be cluster-external IPs"; Calico matches pod IPs, Cilium does not), so
``Cluster(ipblocks_match_pods=...)`` picks: True to prove a refusal holds either way.

network-config-analyzer (np-guard, on PyPI) was considered: an analyzer CLI whose answers
are text to parse, with ipBlocks as cluster-external addresses only and no hostNetwork pods.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    ip: str = "10.244.0.1"
    # named container ports: (name, protocol) -> number
    ports: dict[tuple[str, str], int] = field(default_factory=dict, hash=False)
    host_network: bool = False
    node_ip: str = "172.18.0.2"

    @property
    def address(self) -> str:
        return self.node_ip if self.host_network else self.ip


Endpoint = Pod | str  # a pod, or an address outside every pod (the API server, the web)


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions, ANDed; {} selects everything)."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def in_block(block: dict[str, Any], address: str) -> bool:
    ip = ipaddress.ip_address(address)
    network = ipaddress.ip_network(block["cidr"], strict=False)
    if ip.version != network.version or ip not in network:
        return False
    return not any(ip in ipaddress.ip_network(e, strict=False) for e in block.get("except", []))


def policy_types(spec: dict[str, Any]) -> set[str]:
    if spec.get("policyTypes"):
        return set(spec["policyTypes"])
    return {"Ingress", "Egress"} if "egress" in spec else {"Ingress"}


@dataclass
class Cluster:
    namespaces: dict[str, dict[str, str]]  # name -> labels
    policies: list[dict[str, Any]]
    ipblocks_match_pods: bool = False

    def namespace_labels(self, name: str) -> dict[str, str]:
        return {**self.namespaces.get(name, {}), NAMESPACE_NAME_LABEL: name}

    def _selecting(self, pod: Endpoint, direction: str) -> list[dict[str, Any]]:
        if not isinstance(pod, Pod) or pod.host_network:
            return []
        return [
            p
            for p in self.policies
            if p["metadata"]["namespace"] == pod.namespace
            and direction in policy_types(p["spec"])
            and selects(p["spec"].get("podSelector"), pod.labels)
        ]

    def _peer(self, peer: dict[str, Any], policy_namespace: str, other: Endpoint) -> bool:
        if "ipBlock" in peer:
            if isinstance(other, Pod) and not other.host_network:
                return self.ipblocks_match_pods and in_block(peer["ipBlock"], other.ip)
            address = other.address if isinstance(other, Pod) else other
            return in_block(peer["ipBlock"], address)
        if not isinstance(other, Pod) or other.host_network:
            return False
        if "namespaceSelector" in peer:
            if not selects(peer["namespaceSelector"], self.namespace_labels(other.namespace)):
                return False
        elif other.namespace != policy_namespace:
            return False
        return "podSelector" not in peer or selects(peer["podSelector"], other.labels)

    @staticmethod
    def _port(rule_port: dict[str, Any], destination: Endpoint, port: int, protocol: str) -> bool:
        if rule_port.get("protocol", "TCP") != protocol:
            return False
        wanted = rule_port.get("port")
        if wanted is None:
            return True
        if isinstance(wanted, str):  # a named port: the destination pod's own
            if not isinstance(destination, Pod):
                return False
            return destination.ports.get((wanted, protocol)) == port
        return wanted <= port <= rule_port.get("endPort", wanted)

    def _rules_allow(
        self, pod: Pod, direction: str, other: Endpoint, destination: Endpoint, port: int, protocol
    ) -> bool:
        key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
        for policy in self._selecting(pod, direction):
            for rule in policy["spec"].get(key) or []:
                peers = rule.get(peers_key) or []
                ports = rule.get("ports") or []
                namespace = policy["metadata"]["namespace"]
                if peers and not any(self._peer(p, namespace, other) for p in peers):
                    continue
                if ports and not any(self._port(p, destination, port, protocol) for p in ports):
                    continue
                return True
        return False

    def isolated(self, pod: Endpoint, direction: str) -> bool:
        return bool(self._selecting(pod, direction))

    def allows(self, source: Endpoint, destination: Endpoint, port: int, protocol="TCP") -> bool:
        """Both ends' policies allow ``source`` to connect to ``destination:port``."""
        egress = not self.isolated(source, "Egress") or self._rules_allow(
            source, "Egress", destination, destination, port, protocol
        )
        ingress = not self.isolated(destination, "Ingress") or self._rules_allow(
            destination, "Ingress", source, destination, port, protocol
        )
        return egress and ingress
