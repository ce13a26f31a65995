#!/usr/bin/env bash
# Creates the kind cluster for the e2e suite, installs KWOK in it with slascaler's stages,
# and adds fake GPU nodes. Needs docker, kind and kubectl on PATH, and network access to the
# kwok release. Prints the KUBECONFIG to pass to `pytest --e2e --kubeconfig=...`.
# Not run on the project's CI machines (no Docker engine there); see README.md here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../cluster/versions.env
source "$here/../cluster/versions.env"
nodes="${GPU_NODES:-2}" gpus="${GPUS_PER_NODE:-4}" delay_ms="${READY_DELAY_MS:-3000}"
kubeconfig="${KUBECONFIG_OUT:-$here/kubeconfig}"
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found" >&2; exit 2; }
done
kind create cluster --config "$here/cluster.yaml" --kubeconfig "$kubeconfig"
export KUBECONFIG="$kubeconfig"
release="https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION"
kubectl apply -f "$release/kwok.yaml"
# slascaler's stages (Running at once, Ready after the delay) instead of KWOK's fast ones.
sed "s/__READY_DELAY_MS__/$delay_ms/" "$here/../cluster/kwok-stages.yaml" | kubectl apply -f -
kubectl -n kube-system rollout status deployment/kwok-controller --timeout=120s
for i in $(seq 0 $((nodes - 1))); do
  kubectl apply -f - <<NODE
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels:
    slascaler.io/fake-gpu-node: "true"
    kubernetes.io/hostname: gpu-node-$i
    kubernetes.io/os: linux
    nvidia.com/gpu.present: "true"
    type: kwok
status:
  capacity: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$gpus"}
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$gpus"}
NODE
done
kubectl wait --for=condition=Ready node -l slascaler.io/fake-gpu-node=true --timeout=120s
echo "export KUBECONFIG=$kubeconfig"
