#!/usr/bin/env bash
# Builds the operator image from operator/Dockerfile without a Docker engine and prints the path
# of the OCI archive. Called by `make image` (and so by `make test` before the e2e suite, whose
# stand-in kubelet runs the chart's operator pod from this image: e2e/image.py).
#
# - Base: Debian bookworm with python3 (3.11), python3-venv, ca-certificates and libstdc++6
#   (numpy's wheels link it; python:3.11-slim has it through apt), made by mmdebstrap and imported into buildah as BASE (the Dockerfile's default stays the public
#   python:3.11-slim). Cached as a tarball keyed on its recipe.
# - Image: `buildah bud` (chroot isolation, vfs storage in a private, temporary store) on that
#   base, exported as an OCI archive to ~/.cache/slascaler/image/<key>/ (or $SLASCALER_CACHE),
#   where <key> hashes the build context (pyproject.toml, README.md, operator/), this script
#   and the base's key. A warm run finds it and prints its path in well under a second.
# - pip inside the build reaches the package index with the host's pip configuration: the
#   effective settings (`pip config list`: files and PIP_* variables) are written to a
#   temporary pip.conf mounted read-only at /etc/pip.conf, with the files they name (a CA
#   bundle, a local find-links directory) mounted read-only at the same paths. Mounts are not
#   part of the image: nothing of the host's configuration is baked in.
#
# Needs root (buildah's chroot isolation, mmdebstrap); mmdebstrap and buildah are installed
# from Debian's packages when missing. Prints progress on stderr, the archive's path on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
self="$root/operator/image/build.sh"
cache="${SLASCALER_CACHE:-$HOME/.cache/slascaler}/image"
suite=bookworm
base_packages=python3,python3-venv,ca-certificates,libstdc++6
mkdir -p "$cache"

say() { echo "image: $*" >&2; }

# -- the cache key: the build context as the Dockerfile sees it, and the recipe ---------------
context_files() {  # the files the Dockerfile's COPY lines read, sorted, without bytecode
  (cd "$root" && find pyproject.toml README.md operator -type f \
    ! -path '*/__pycache__/*' ! -name '*.pyc' | LC_ALL=C sort)
}
base_key="$(printf '%s\n' "$suite" "$base_packages" "$(sed -n '/^# -- base$/,/^# -- end base$/p' "$self")" \
  | sha256sum | cut -c1-16)"
key="$( (cd "$root" && context_files | xargs sha256sum; sha256sum <"$self"; echo "$base_key") \
  | sha256sum | cut -c1-16)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml" | head -n1)"
out="$cache/$key"
archive="$out/slascaler-operator.oci.tar"
if [ -f "$archive" ]; then
  echo "$archive"
  exit 0
fi

# One build at a time per cache: a second caller waits, then finds the archive.
exec 9>"$cache/.lock"
flock 9
if [ -f "$archive" ]; then
  echo "$archive"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "image: building needs root (buildah chroot isolation, mmdebstrap)" >&2
  exit 2
fi
if ! command -v mmdebstrap >/dev/null || ! command -v buildah >/dev/null; then
  say "installing mmdebstrap and buildah from Debian's packages"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    mmdebstrap buildah >&2
fi

started=$SECONDS
work="$(mktemp -d "$cache/work.XXXXXX")"
store=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
cleanup() {
  buildah "${store[@]}" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# -- base
base_tar="$cache/base-$base_key.tar"
if [ ! -f "$base_tar" ]; then
  say "making the base: Debian $suite with $base_packages (mmdebstrap)"
  mmdebstrap --quiet --variant=essential --include="$base_packages" --format=tar \
    "$suite" "$work/base.tar" >&2
  mv "$work/base.tar" "$base_tar"
  find "$cache" -maxdepth 1 -name 'base-*.tar' ! -name "base-$base_key.tar" -delete
fi
# -- end base

say "importing the base"
container="$(buildah "${store[@]}" from scratch)"
mount="$(buildah "${store[@]}" mount "$container")"
tar -C "$mount" -xf "$base_tar"
# mmdebstrap copies the host's resolv.conf and hostname: a container runtime provides both.
rm -f "$mount/etc/resolv.conf" "$mount/etc/hostname"
buildah "${store[@]}" umount "$container" >/dev/null
buildah "${store[@]}" config \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 --cmd python3 "$container"
buildah "${store[@]}" commit --quiet "$container" "localhost/slascaler-base:$base_key" >/dev/null
buildah "${store[@]}" rm "$container" >/dev/null

# -- pip's configuration, passed through for the build only
# `pip config list` prints files' settings, then PIP_* variables (which win): the last one of a
# name is kept.
declare -A pip_settings=()
while IFS= read -r line; do
  name="${line%%=*}"; name="${name#*.}"; value="${line#*=}"; value="${value#\'}"; value="${value%\'}"
  case "$name" in
    index-url|extra-index-url|find-links|trusted-host|cert|client-cert|timeout|default-timeout|retries|proxy|no-index)
      pip_settings[$name]="$value" ;;
  esac
done < <(python3 -m pip config list 2>/dev/null || true)
mounts=()
pipconf="$work/pip.conf"
echo "[global]" >"$pipconf"
for name in "${!pip_settings[@]}"; do
  value="${pip_settings[$name]}"
  echo "$name = $value" >>"$pipconf"
  case "$name" in
    cert|client-cert|find-links)  # local files and directories: mounted at the same path
      for path in $value; do
        if [ -e "$path" ]; then mounts+=(-v "$path:$path:ro"); fi
      done ;;
  esac
done
mounts+=(-v "$pipconf:/etc/pip.conf:ro")

say "building operator/Dockerfile (buildah bud, chroot isolation)"
context="$work/context"
mkdir -p "$context"
(cd "$root" && context_files | tar -cf - -T - | tar -C "$context" -xf -)
tag="localhost/slascaler/operator:$version"
buildah "${store[@]}" bud --quiet --isolation chroot --layers=false \
  --build-arg "BASE=localhost/slascaler-base:$base_key" "${mounts[@]}" \
  -f "$context/operator/Dockerfile" -t "$tag" "$context" >&2

mkdir -p "$work/out"
buildah "${store[@]}" push --quiet "$tag" "oci-archive:$work/out/slascaler-operator.oci.tar:slascaler/operator:$version" >&2
rm -rf "$out"
mv "$work/out" "$out"
# Keep the three newest images (other checkouts may use older ones), drop the rest.
find "$cache" -mindepth 1 -maxdepth 1 -type d -regextype egrep -regex '.*/[0-9a-f]{16}' \
  -printf '%T@ %p\n' | sort -rn | tail -n +4 | cut -d' ' -f2- | xargs -r rm -rf
say "built in $((SECONDS - started)) s: $archive ($(du -h "$archive" | cut -f1))"
echo "$archive"
