#!/usr/bin/env bash
# Builds the local e2e substrate's binaries from the Go module proxy into
# ~/.cache/slascaler/bin/<versions-hash>/ and prints that directory. Idempotent: a binary
# already built for the pinned versions is kept. Work in progress for the substrate issue:
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl so far.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
cache="${SLASCALER_CACHE:-$HOME/.cache/slascaler}"
stamp="$(cksum < "$here/versions.env" | cut -d' ' -f1)"
bin="$cache/bin/$stamp"
work="$cache/src/kubernetes-$KUBERNETES_VERSION"
mkdir -p "$bin" "$work"

staging_version="v0.${KUBERNETES_VERSION#v1.}"
if [ ! -f "$work/go.mod" ]; then
  (
    cd "$work"
    go mod init slascaler.local/substrate >/dev/null 2>&1
    gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
    # k8s.io/kubernetes replaces its staging modules with local paths; as a dependency it
    # needs them replaced by their published versions instead.
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | while read -r module; do
      go mod edit -replace "$module=$module@$staging_version"
    done
    go mod edit -require "k8s.io/kubernetes@$KUBERNETES_VERSION"
  )
fi

major="${KUBERNETES_VERSION#v}"; major="${major%%.*}"
minor="${KUBERNETES_VERSION#v*.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  if [ ! -x "$bin/$cmd" ]; then
    (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$bin/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  fi
done
# The other components are plain modules with a main package: go install at the pin.
install() {  # install NAME MODULE/PATH@VERSION [EXTRA-LDFLAGS]
  local name="$1" target="$2" extra="${3:-}" tmp
  [ -x "$bin/$name" ] && return
  tmp="$(mktemp -d)"
  GOBIN="$tmp" go install -trimpath -ldflags "-s -w $extra" "$target"
  mv "$tmp"/* "$bin/$name"
  rmdir "$tmp"
}
# etcd's server module replaces its sibling modules (../api, ../client/v3, ...) with local
# paths, so go install refuses it; build it inside a wrapper module that pins each sibling at
# the same published version instead.
wrapped() {  # wrapped NAME MODULE VERSION PACKAGE
  local name="$1" module="$2" version="$3" package="$4" dir gomod
  [ -x "$bin/$name" ] && return
  dir="$cache/src/$name-$version"
  mkdir -p "$dir"
  if [ ! -f "$dir/go.mod" ]; then
    (
      cd "$dir"
      go mod init "slascaler.local/$name" >/dev/null 2>&1
      gomod="$(go mod download -json "$module@$version" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
      sed -n 's#^[[:space:]]*\([^[:space:]]*\) => \.\./.*#\1#p' "$gomod" | while read -r sibling; do
        go mod edit -replace "$sibling=$sibling@$version"
      done
      go mod edit -require "$module@$version"
    )
  fi
  (cd "$dir" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin/$name" "$package")
}
wrapped etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3
install kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
install helm "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" \
  "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
# Without the builtinassets tag the web UI is not embedded; the HTTP API the tests use is.
install prometheus "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION" \
  "-X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION"
echo "$bin"
