#!/usr/bin/env bash
# End-to-end check of the testbed, with the wall time of every step:
# host setup, image build, then for each size N: up, ping over SSH, up again (must change nothing), down.
#
# Usage: sudo PATH="$PWD/.venv/bin:$PATH" testbed/e2e.sh [N ...]     (default sizes: 2 4)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly SCRIPT_DIR
REPO="$(dirname "${SCRIPT_DIR}")"
readonly REPO
LOG_DIR="$(mktemp -d /tmp/mtt-testbed-e2e.XXXXXX)"
readonly LOG_DIR
TIMINGS=()

# step NAME COMMAND...: run it with its output in ${LOG_DIR}/NAME.log, record its wall time
step() {
  local name="$1" started rc=0
  shift
  started=$(date +%s.%N)
  "$@" >"${LOG_DIR}/${name}.log" 2>&1 || rc=$?
  TIMINGS+=("$(printf '%-28s %7.1fs' "${name}" "$(echo "$(date +%s.%N) - ${started}" | bc)")")
  printf '%s\n' "${TIMINGS[-1]}"
  if ((rc != 0)); then
    tail -n 40 "${LOG_DIR}/${name}.log" >&2
    echo "e2e: step ${name} failed (rc=${rc}); full log: ${LOG_DIR}/${name}.log" >&2
    exit "${rc}"
  fi
}

# the last PLAY RECAP must show changed=0 for every host
no_changes() {
  local log="${LOG_DIR}/$1.log"
  if sed -n '/PLAY RECAP/,$p' "${log}" | grep -Eq 'changed=[1-9]'; then
    grep -E '^changed:' "${log}" >&2 || true
    echo "e2e: $1 is not idempotent (see ${log})" >&2
    exit 1
  fi
}

cd "${REPO}"
command -v ansible-playbook >/dev/null || { echo "e2e: ansible-playbook not on PATH (activate .venv)" >&2; exit 1; }
step host-setup "${SCRIPT_DIR}/host-setup.sh"
step build-images "${SCRIPT_DIR}/build-images.sh"
sizes=("$@")
((${#sizes[@]} > 0)) || sizes=(2 4)
for size in "${sizes[@]}"; do
  step "up-${size}" ansible-playbook "${SCRIPT_DIR}/up.yml" -e "testbed_nodes=${size}"
  step "ping-${size}" ansible -i inventory/testbed all -m ansible.builtin.ping
  step "up-${size}-again" ansible-playbook "${SCRIPT_DIR}/up.yml" -e "testbed_nodes=${size}"
  no_changes "up-${size}-again"
  step "down-${size}" ansible-playbook "${SCRIPT_DIR}/down.yml"
done
step down-again ansible-playbook "${SCRIPT_DIR}/down.yml"
no_changes down-again
echo "e2e: passed; logs in ${LOG_DIR}"
