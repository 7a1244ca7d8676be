#!/usr/bin/env bash
# The lint and every test, as `make test` runs them: the phases run at once where they can, arranged so that the
# machine's CPUs are used while the testbed's tests wait on real time (hang timeouts, Slurm's timers, a link cut).
#
#   1. `make lint`, then the tests that need no testbed (pytest -m "not testbed and not standin"), in the background
#      at a low CPU priority: their own session (autogroup) and nice both at 10, so that they take the CPU the
#      testbed phases leave idle and yield it to the node containers and to the testbed tests' own playbooks.
#   2. The molecule scenario from no testbed (destroy, then create, converge, idempotence, verify) with the
#      testbed left up at its end (--destroy=never).
#   3. The testbed's tests (-m testbed), one at a time, on the testbed molecule converged
#      (MTT_TESTBED_CONVERGED_BY=molecule: their session fixture neither brings it up nor provisions it again),
#      torn down after them.
#   4. The stand-in image's own Megatron checks (-m standin: Megatron in a container of that image, not on the
#      testbed). Where docker can put that container in a CPU cgroup that runs only when no other task wants the
#      CPU (cgroup v1's cpu.idle, docker's cgroupfs driver), they run in the background once phase 1 has ended and
#      the images are built: on the CPU time phase 3 leaves idle (phase 3's tests beside them still lose a little
#      speed: benchmarks/RESULTS.md). Elsewhere they run after phase 3.
#
# The output of the background phases goes to .cache/lint-and-tests-without-testbed.log and is printed when they
# end. The status is non-zero when any phase failed; each phase's end and time is said.
set -uo pipefail
cd "$(dirname "$0")/.." || exit

BIN=.venv/bin
export PATH="${PWD}/${BIN}:${PATH}" # molecule runs ansible-config and ansible-playbook by name (make exports it too)
PARALLEL=${PARALLEL--n auto --maxprocesses 4} # empty (make test PARALLEL=): one process
LOG=.cache/lint-and-tests-without-testbed.log
IMAGES_STATUS=.cache/test-all-images.status # phase 2's image build's status, for phase 4 in the background
IDLE_CGROUP=mtt-test-background
start=$SECONDS

say() { printf '\n[make test] %s (%d s in)\n' "$1" "$((SECONDS - start))"; }

# The CPU cgroup phase 4's container runs in (docker run --cgroup-parent), when this machine can make one that runs
# only on idle CPU time: its name for docker, or nothing.
idle_cgroup() {
    local dir=/sys/fs/cgroup/cpu/${IDLE_CGROUP}
    [[ $(docker info --format '{{.CgroupDriver}} {{.CgroupVersion}}' 2>/dev/null) == "cgroupfs 1" ]] || return 0
    mkdir -p "${dir}" 2>/dev/null && [[ -e ${dir}/cpu.idle ]] && echo 1 >"${dir}/cpu.idle" 2>/dev/null || return 0
    echo "/${IDLE_CGROUP}"
}

standin_tests() {
    MTT_STANDIN_CGROUP_PARENT=${1:-} "${BIN}/pytest" -q -m standin --durations=10 tests
}

# Phases 1 and 4 (when 4 runs in the background), in their own session, at a low priority.
if [[ ${1:-} == --background ]]; then
    echo 10 >/proc/self/autogroup 2>/dev/null
    renice -n 10 $$ >/dev/null
    # shellcheck disable=SC2086 # PARALLEL holds pytest's options, split on purpose
    make --no-print-directory lint && "${BIN}/pytest" -q -m "not testbed and not standin" ${PARALLEL} --durations=10 tests
    without=$?
    if [[ -n ${2:-} ]]; then
        until [[ -s ${IMAGES_STATUS} ]]; do sleep 5; done
        printf '\n[make test] the stand-in image Megatron checks, in CPU cgroup %s (idle time only)\n' "$2"
        if [[ $(<"${IMAGES_STATUS}") == 0 ]]; then standin_tests "$2"; else echo "the images were not built"; false; fi
        standin=$?
    fi
    exit $((without || ${standin:-0}))
fi

rm -f "${IMAGES_STATUS}"
mkdir -p .cache
testbed/host-setup.sh # docker.io and a dockerd that answers, before the cgroup is chosen and the images are built
host_setup=$?
cgroup=$(idle_cgroup)
if [[ -n ${cgroup} ]]; then
    say "the lint, the tests that need no testbed, then the stand-in image's Megatron checks start in the background at a low CPU priority (output: ${LOG})"
else
    say "the lint and the tests that need no testbed start in the background at a low CPU priority (output: ${LOG})"
fi
setsid -w bash "$0" --background "${cgroup}" >"${LOG}" 2>&1 &
background=$!
# Interrupted (^C reaches only this session): the background session's processes too. setsid may have forked; the
# children of $background are in the new session either way.
stop_background() {
    local session
    session=$(ps -o sid= --ppid "${background}" | head -1)
    [[ -n ${session// /} ]] && pkill -TERM -s "${session// /}"
    exit 130
}
trap stop_background INT TERM

say "the molecule scenario, the testbed left up for the testbed's tests"
((host_setup == 0)) && testbed/build-images.sh
echo $? >"${IMAGES_STATUS}"
# --destroy=never skips the scenario's first destroy too: `molecule destroy` first, so that it starts from no testbed
[[ $(<"${IMAGES_STATUS}") == 0 ]] && "${BIN}/molecule" destroy && "${BIN}/molecule" test --destroy=never
molecule=$?
say "molecule: status ${molecule}"

say "the testbed's tests"
# the session starts from the testbed molecule brought up and converged (tests/integration/conftest.py)
converged_by=""
((molecule == 0)) && converged_by=molecule
MTT_TESTBED_CONVERGED_BY=${converged_by} "${BIN}/pytest" -q -m testbed --durations=25 tests
testbed=$?
say "the testbed's tests: status ${testbed}"

standin=0
if [[ -z ${cgroup} ]]; then
    say "the stand-in image's Megatron checks (no idle CPU cgroup here: after the testbed's tests)"
    standin_tests
    standin=$?
    say "the stand-in image's Megatron checks: status ${standin}"
fi

wait "${background}"
without=$?
say "the background phases: status ${without}; their output:"
cat "${LOG}"

for status in "${without}" "${molecule}" "${testbed}" "${standin}"; do
    ((status == 0)) || exit 1
done
