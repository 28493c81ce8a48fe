#!/usr/bin/env bash
# A Docker engine of the repository's own, for `make image` and the container tests: Debian's docker.io daemon
# with its state under var/docker/, no bridge and no iptables (containers use --network host), reached through its
# own socket. It never touches another daemon on the machine and is stopped by its pidfile alone.
#   docker/engine.sh install   apt-get install docker.io mmdebstrap when dockerd is missing (root, Debian)
#   docker/engine.sh start     start the daemon unless it answers already; wait until it does
#   docker/engine.sh stop      stop the daemon started here (SIGTERM to the pid in its pidfile)
#   docker/engine.sh host      print the DOCKER_HOST value to use
set -euo pipefail
cd "$(dirname "$0")/.."
STATE="${DOCKER_STATE_DIR:-$PWD/var/docker}"
SOCKET="$STATE/docker.sock"
PIDFILE="$STATE/dockerd.pid"
# Debian's client has BuildKit built in; a docker client elsewhere on PATH may want a buildx plugin it lacks.
DOCKER=/usr/bin/docker
export DOCKER_HOST="unix://$SOCKET"

answers() { [[ -S "$SOCKET" ]] && timeout 10 "$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

case "${1:-}" in
install)
    if [[ -x /usr/sbin/dockerd && -x "$DOCKER" && -x /usr/bin/mmdebstrap ]]; then exit 0; fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends docker.io mmdebstrap
    ;;
start)
    if answers; then exit 0; fi
    [[ -x /usr/sbin/dockerd ]] || { echo "engine.sh: no /usr/sbin/dockerd: run 'docker/engine.sh install'" >&2; exit 1; }
    mkdir -p "$STATE"
    nohup /usr/sbin/dockerd --data-root "$STATE/root" --exec-root "$STATE/exec" --pidfile "$PIDFILE" \
        --host "$DOCKER_HOST" --iptables=false --ip6tables=false --bridge=none \
        >>"$STATE/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do
        if answers; then exit 0; fi
        sleep 1
    done
    echo "engine.sh: dockerd did not answer within 60 s; see $STATE/dockerd.log" >&2
    tail -20 "$STATE/dockerd.log" >&2
    exit 1
    ;;
stop)
    [[ -f "$PIDFILE" ]] || exit 0
    pid="$(cat "$PIDFILE")"
    kill -TERM "$pid" 2>/dev/null || exit 0
    for _ in $(seq 30); do
        kill -0 "$pid" 2>/dev/null || exit 0
        sleep 1
    done
    echo "engine.sh: dockerd ($pid) still running after 30 s" >&2
    exit 1
    ;;
host)
    echo "$DOCKER_HOST"
    ;;
*)
    echo "usage: $0 install|start|stop|host" >&2
    exit 2
    ;;
esac
