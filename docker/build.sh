#!/usr/bin/env bash
# Builds the `cpu` and `loadtest` images with no network inside the build, and does nothing when images built from
# the same inputs (files of the build context, wheelhouse, base image) exist already: they are tagged with a hash of
# those inputs. Prints the two image names on stdout; everything else goes to stderr.
#   BASE_IMAGE  the base of both images. Unset: python:3.11-slim-bookworm when the engine has it, else the local
#               Debian base if made already, else the registry's image if it can be pulled, else a local Debian
#               bookworm base made here with mmdebstrap (local/python:3.11-bookworm).
#   BUNDLE      the bundle baked into the cpu image (bundles/all-minilm-l6-v2; `make bundle` exports it)
#   PYTHON      the Python 3.11 whose pip fills docker/wheelhouse (.venv/bin/python)
#   DOCKER_HOST the engine; unset: the repository's own (docker/engine.sh, started if need be)
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE="${BUNDLE:-bundles/all-minilm-l6-v2}"
PYTHON="${PYTHON:-.venv/bin/python}"
DOCKER="${DOCKER:-/usr/bin/docker}"
REGISTRY_BASE=python:3.11-slim-bookworm
LOCAL_BASE=local/python:3.11-bookworm
WHEELHOUSE=docker/wheelhouse
if [[ -z "${DOCKER_HOST:-}" ]]; then
    docker/engine.sh start
    DOCKER_HOST="$(docker/engine.sh host)"
fi
export DOCKER_HOST DOCKER_BUILDKIT=1

log() { echo "build.sh: $*" >&2; }
has_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

[[ -f "$BUNDLE/bundle.json" ]] || { log "no bundle at $BUNDLE: run 'make bundle' first"; exit 1; }

# What the images install from the wheelhouse: pyproject's build backend, dependencies and `service` extra, and the
# loadtest target's Locust (its version is the Dockerfile's LOCUST_VERSION).
requirements="$(
    "$PYTHON" - <<'PY'
import re, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))
locust = re.search(r"^ARG LOCUST_VERSION=(\S+)", open("docker/Dockerfile").read(), re.M).group(1)
print("\n".join([*p["build-system"]["requires"], "wheel", *p["project"]["dependencies"],
                 *p["project"]["optional-dependencies"]["service"], f"locust=={locust}"]))
PY
)"
if [[ "$(cat "$WHEELHOUSE/.requirements" 2>/dev/null)" != "$requirements" ]]; then
    log "filling $WHEELHOUSE with pip"
    mkdir -p var/docker
    "$PYTHON" -m pip wheel --quiet --wheel-dir "$WHEELHOUSE" -r <(echo "$requirements") >var/docker/wheelhouse.log 2>&1 ||
        { tail -20 var/docker/wheelhouse.log >&2; log "pip could not fill $WHEELHOUSE"; exit 1; }
    echo "$requirements" >"$WHEELHOUSE/.requirements"
fi

make_local_base() {
    command -v mmdebstrap >/dev/null || { log "no mmdebstrap: run 'docker/engine.sh install'"; exit 1; }
    log "making $LOCAL_BASE with mmdebstrap (Debian bookworm, Python 3.11; a few minutes)"
    local tarball="var/docker/base-rootfs.tar"
    mkdir -p var/docker
    # The essential packages plus Python and the C++ runtime that manylinux wheels expect of the system: no apt, no
    # perl (the merged-usr hook spares the usrmerge package), no docs.
    mmdebstrap --quiet --variant=essential --include=python3,python3-venv,passwd,libstdc++6 \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        bookworm "$tarball" >&2
    "$DOCKER" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$tarball" "$LOCAL_BASE" >&2
    rm "$tarball"
}

if [[ -n "${BASE_IMAGE:-}" ]]; then
    base="$BASE_IMAGE"
elif has_image "$REGISTRY_BASE"; then
    base="$REGISTRY_BASE"
elif has_image "$LOCAL_BASE"; then
    base="$LOCAL_BASE"
elif timeout 120 "$DOCKER" pull --quiet "$REGISTRY_BASE" >&2; then
    base="$REGISTRY_BASE"
else
    log "cannot pull $REGISTRY_BASE: using a local Debian base"
    make_local_base
    base="$LOCAL_BASE"
fi
has_image "$base" || "$DOCKER" pull --quiet "$base" >&2

# The inputs: the base image's id, the bundle's name, and every file the build context sends that the Dockerfile
# reads (the offline parts of metricsearch/ stay out of the context, so they are left out here too).
inputs="$(
    {
        "$DOCKER" image inspect --format '{{.Id}}' "$base"
        echo "$BUNDLE"
        find pyproject.toml README.md .dockerignore docker/Dockerfile loadtests/locustfile.py metricsearch "$BUNDLE" \
            "$WHEELHOUSE" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path 'metricsearch/trainer/*' \
            ! -path 'metricsearch/export/*' ! -path 'metricsearch/evaluation/*' -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-12
)"
cpu="metricsearch:cpu-$inputs"
loadtest="metricsearch:loadtest-$inputs"

for target in cpu loadtest; do
    image="metricsearch:$target-$inputs"
    if has_image "$image"; then
        continue
    fi
    log "building $image on $base (its log: var/docker/build-$target.log)"
    start=$SECONDS
    if ! "$DOCKER" build --progress plain --network none --file docker/Dockerfile --target "$target" \
        --build-arg "PYTHON_IMAGE=$base" --build-arg "BUNDLE=$BUNDLE" --tag "$image" --tag "metricsearch:$target" . \
        >"var/docker/build-$target.log" 2>&1; then
        tail -40 "var/docker/build-$target.log" >&2
        log "building $image failed"
        exit 1
    fi
    log "built $image in $((SECONDS - start)) s"
done

# Older builds of ours: untag them (an image a container still uses stays), then drop what nothing names.
"$DOCKER" image ls metricsearch --format '{{.Repository}}:{{.Tag}}' | grep -E ':(cpu|loadtest)-[0-9a-f]{12}$' |
    grep -v -- "-$inputs\$" | xargs -r "$DOCKER" rmi >/dev/null 2>&1 || true
"$DOCKER" image prune --force >/dev/null

echo "$cpu $loadtest"
