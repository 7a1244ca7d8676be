#!/usr/bin/env bash
# Prepare this machine to host the mtt-train-ops testbed (run as root, idempotent).
#
#  - installs the Debian packages the testbed needs when they are missing
#    (docker.io, debootstrap, the small tools the build and bring-up use, and Prometheus' promtool and
#    Alertmanager's amtool for the monitoring files' tests);
#  - starts dockerd when `docker info` does not answer (with systemd where it runs, else by hand, as in CI,
#    logging to /var/log/dockerd-testbed.log) and waits until it answers.
#
# Usage: sudo testbed/host-setup.sh
# Env:   DOCKERD_LOG (default /var/log/dockerd-testbed.log)
#        DOCKERD_WAIT_S (default 60): how long to wait for dockerd to answer.
set -euo pipefail

readonly PACKAGES=(
  docker.io      # dockerd, containerd, runc (the testbed's outer engine)
  debootstrap    # builds the node and stand-in image root filesystems
  ca-certificates
  openssh-client # ssh and ssh-keygen for the controller
  procps         # pgrep
  bc             # testbed/e2e.sh timings
  prometheus     # promtool: the alert rules' unit tests (monitoring/rules/)
  prometheus-alertmanager # amtool: checks the Alertmanager configuration the bundle ships
)
readonly DOCKERD_LOG="${DOCKERD_LOG:-/var/log/dockerd-testbed.log}"
readonly DOCKERD_WAIT_S="${DOCKERD_WAIT_S:-60}"

log() { printf '[host-setup] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ ${EUID} -eq 0 ]] || die "run as root (it installs packages and starts dockerd)"

install_missing_packages() {
  local missing=() pkg
  for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("${pkg}")
    fi
  done
  if ((${#missing[@]} == 0)); then
    log "packages present: ${PACKAGES[*]}"
    return
  fi
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

docker_answers() { docker info >/dev/null 2>&1; }

launch_dockerd() {
  if [[ -d /run/systemd/system ]]; then
    log "starting dockerd with systemd"
    systemctl start docker
  else
    log "starting dockerd (log: ${DOCKERD_LOG})"
    # setsid: detach from this shell so dockerd outlives it (no init system to own it).
    setsid dockerd >>"${DOCKERD_LOG}" 2>&1 </dev/null &
  fi
}

# Start dockerd unless it answers; a dockerd that is still starting (or still shutting down) is waited for.
start_dockerd() {
  if docker_answers; then
    log "dockerd already answers"
    return
  fi
  local waited=0 launched=0
  until docker_answers; do
    if ! pgrep -x dockerd >/dev/null; then
      ((launched == 0)) || die "dockerd exited; see ${DOCKERD_LOG}"
      launch_dockerd
      launched=1
    fi
    ((waited < DOCKERD_WAIT_S)) || die "dockerd did not answer within ${DOCKERD_WAIT_S}s; see ${DOCKERD_LOG}"
    sleep 1
    waited=$((waited + 1))
  done
  log "dockerd answers (after ${waited}s)"
}

install_missing_packages
start_dockerd
