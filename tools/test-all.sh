#!/usr/bin/env bash
# The lint and every test, as `make test` runs them: three phases at once, arranged so that the machine's CPUs are
# used while the testbed's tests wait on real time (hang timeouts, Slurm's timers, a link cut for 15 s).
#
#   1. `make lint`, then the tests that need no testbed (pytest -m "not testbed"), in the background at a low CPU
#      priority: their own session (autogroup) and nice both at 10, so that they take the CPU the testbed phases
#      leave idle and yield it to the node containers and to the testbed tests' own playbooks. Their output goes to
#      .cache/lint-and-tests-without-testbed.log and is printed when they end.
#   2. The molecule scenario from no testbed (destroy, then create, converge, idempotence, verify) with the
#      testbed left up at its end (--destroy=never).
#   3. The testbed's tests, one at a time, on the testbed molecule converged (MTT_TESTBED_CONVERGED_BY=molecule:
#      their session fixture neither brings it up nor provisions it again), torn down after them.
#
# The status is non-zero when any phase failed; each phase's end and time is said.
set -uo pipefail
cd "$(dirname "$0")/.." || exit

BIN=.venv/bin
export PATH="${PWD}/${BIN}:${PATH}" # molecule runs ansible-config and ansible-playbook by name (make exports it too)
PARALLEL=${PARALLEL:--n auto --maxprocesses 4}
LOG=.cache/lint-and-tests-without-testbed.log
mkdir -p .cache
start=$SECONDS

say() { printf '\n[make test] %s (%d s in)\n' "$1" "$((SECONDS - start))"; }

say "the lint and the tests that need no testbed start in the background at a low CPU priority (output: ${LOG})"
# shellcheck disable=SC2016 # expanded by the inner bash
setsid -w bash -c 'echo 10 > /proc/self/autogroup 2>/dev/null; renice -n 10 $$ >/dev/null
    make --no-print-directory lint && "$0"/pytest -q -m "not testbed" $1 --durations=10 tests' \
    "${BIN}" "${PARALLEL}" >"${LOG}" 2>&1 &
unit=$!
# Interrupted (^C reaches only this session): the background session's processes too. setsid may have forked; the
# children of $unit are in the new session either way.
stop_background() {
    local session
    session=$(ps -o sid= --ppid "${unit}" | head -1)
    [[ -n ${session// /} ]] && pkill -TERM -s "${session// /}"
    exit 130
}
trap stop_background INT TERM

say "the molecule scenario, the testbed left up for the testbed's tests"
# --destroy=never skips the scenario's first destroy too: `molecule destroy` first, so that it starts from no testbed
testbed/host-setup.sh && testbed/build-images.sh && "${BIN}/molecule" destroy && "${BIN}/molecule" test --destroy=never
molecule=$?
say "molecule: status ${molecule}"

say "the testbed's tests"
# the session starts from the testbed molecule brought up and converged (tests/integration/conftest.py)
converged_by=""
((molecule == 0)) && converged_by=molecule
MTT_TESTBED_CONVERGED_BY=${converged_by} "${BIN}/pytest" -q -m testbed --durations=25 tests
testbed=$?
say "the testbed's tests: status ${testbed}"

wait "${unit}"
without=$?
say "the lint and the tests that need no testbed: status ${without}; their output:"
cat "${LOG}"

for status in "${without}" "${molecule}" "${testbed}"; do
    ((status == 0)) || exit 1
done
