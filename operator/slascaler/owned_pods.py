"""What Kubernetes says a Deployment's pods are: the ReplicaSets it owns and their pods.

`kube.pods` reads them from the API server; `metrics.promql` turns them into the pod matcher
of the queries (`owned_pods_pattern`). Kept below both, so that neither the Kubernetes edge
nor the metric source depends on the other. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass

# The API server cuts a generateName base to 58 characters before adding 5 random ones.
GENERATED_BASE_MAX = 58


@dataclass(frozen=True)
class OwnedPods:
    """The pods Kubernetes says a Deployment has: the ReplicaSets it owns, and the pods they
    own now (by name), read by `kube.fleet`."""

    replica_sets: tuple[str, ...]
    pods: tuple[tuple[str, str], ...] = ()  # (pod, its ReplicaSet)

    def cut(self) -> tuple[str, ...]:
        """ReplicaSets whose pod names the API server cuts before the suffix: their pods'
        names cannot be told from those of another ReplicaSet with the same first 58
        characters, so only their current pods, by exact name, are theirs."""
        return tuple(rs for rs in self.replica_sets if len(rs) + 1 > GENERATED_BASE_MAX)
