#!/usr/bin/env bash
# Deletes the kind cluster made by up.sh.
set -euo pipefail
kind delete cluster --name slascaler-e2e
rm -f "$(cd "$(dirname "$0")" && pwd)/kubeconfig"
