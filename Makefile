# mtt-train-ops: `make plan` (set up, then plan the example cluster), `make test`.
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)

.PHONY: demo demo-slurm setup plan test test-fast lint bench clean testbed-up testbed-down molecule card-check megatron-src

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

## The main job on the built-in default: the whole lifecycle on the local testbed, over SSH. With a Megatron-LM tree
## (make megatron-src), the stand-in has it and train.yml runs Megatron's own pretrain_gpt.py on mock data; else
## the project's smoke job (the testbed's default job).
DEMO_JOB := $(if $(wildcard third_party/Megatron-LM/pretrain_gpt.py),-e smoke=false -e data_path=mock -e gbs=8 -e mbs=2 -e num_microbatches=none)
demo: testbed-up
	$(BIN)/ansible-playbook -i inventory/testbed provision.yml
	$(BIN)/ansible-playbook -i inventory/testbed train.yml -e tp=1 -e pp=1 $(DEMO_JOB)
	$(BIN)/ansible-playbook -i inventory/testbed stop.yml

## The same lifecycle with Slurm as the launcher: the testbed's real Slurm allocates and starts (docs/slurm.md).
demo-slurm: testbed-up
	$(BIN)/ansible-playbook -i inventory/testbed provision.yml
	$(BIN)/ansible-playbook -i inventory/testbed train.yml -e tp=1 -e pp=1 -e launcher=slurm
	$(BIN)/ansible-playbook -i inventory/testbed stop.yml -e launcher=slurm

## Plan Llama3-8B on the example two-node S5000 cluster (named with -i: there is no default inventory).
plan: setup
	$(BIN)/ansible-playbook -i inventory/example playbooks/plan.yml -e tp=1 -e pp=2 -e recommend=true

## The tests that need no testbed run on every core (pytest-xdist, at most 4 workers): they drive playbooks on the
## controller only and share nothing; the testbed's run one at a time, in order, against the one testbed.
PARALLEL ?= -n auto --maxprocesses 4

## Everything CI runs (tools/test-all.sh): the lint and the tests without a testbed in the background at a low CPU
## priority, while the molecule scenario brings the testbed up and converges it and the testbed's tests run on it.
test: setup
	PARALLEL="$(PARALLEL)" tools/test-all.sh

## Unit tests and controller-only playbook tests (no testbed).
test-fast: setup
	$(BIN)/pytest -q -m "not testbed and not standin" $(PARALLEL) tests

## The local testbed: N node containers with their own dockerd and sshd (root; installs docker.io, debootstrap).
TESTBED_NODES ?= 2
testbed-up: setup
	testbed/host-setup.sh
	testbed/build-images.sh
	$(BIN)/ansible-playbook testbed/up.yml -e testbed_nodes=$(TESTBED_NODES)

testbed-down: setup
	$(BIN)/ansible-playbook testbed/down.yml

## The molecule scenario: create, converge (provision.yml), idempotence, verify, destroy.
molecule: setup
	testbed/host-setup.sh
	testbed/build-images.sh
	cd $(CURDIR) && $(BIN)/molecule test

lint: setup
	$(BIN)/ruff check plugins roles tests benchmarks tools testbed
	$(BIN)/ruff format --check plugins roles tests benchmarks tools
	$(BIN)/ansible-lint --profile production --offline playbooks roles provision.yml train.yml stop.yml testbed molecule
	$(BIN)/shellcheck tools/test-all.sh testbed/*.sh testbed/images/*/customize.sh testbed/images/node/rootfs/usr/local/sbin/* \
		testbed/images/training-suite-standin/rootfs/usr/local/bin/mthreads-gmi \
		testbed/images/training-suite-standin/rootfs/usr/local/bin/nvidia-smi roles/health_check/files/kernel_xids.sh roles/collect/files/copy_out.sh \
		testbed/images/training-suite-standin/rootfs/usr/local/musa/mccl_test/all_reduce_perf

## Megatron-LM core_v0.14.0's source into third_party/ (git-ignored; the testbed's stand-in image installs it), from a
## local clone (MEGATRON_GIT=<dir>) or a `git archive` tarball with the prefix Megatron-LM/ (MEGATRON_TARBALL=<file>).
MEGATRON_TAG ?= core_v0.14.0
megatron-src:
	@test -n "$(MEGATRON_GIT)$(MEGATRON_TARBALL)" || \
		{ echo "set MEGATRON_GIT to a clone of NVIDIA/Megatron-LM, or MEGATRON_TARBALL to a tarball of its $(MEGATRON_TAG)"; exit 1; }
	rm -rf third_party/Megatron-LM && mkdir -p third_party/Megatron-LM
	if [ -n "$(MEGATRON_TARBALL)" ]; then \
		tar -xzf "$(MEGATRON_TARBALL)" -C third_party/Megatron-LM --strip-components=1 Megatron-LM/; \
	else \
		git -C "$(MEGATRON_GIT)" archive $(MEGATRON_TAG) | tar -x -C third_party/Megatron-LM; \
	fi
	test -f third_party/Megatron-LM/pretrain_gpt.py && test -f third_party/Megatron-LM/LICENSE
	du -sh third_party/Megatron-LM

## The Megatron launch on this machine's CUDA cards (tools/card_check.py); CARD_CHECK_ARGS=--dry-run without cards.
card-check:
	python3 tools/card_check.py --megatron third_party/Megatron-LM --out card-check $(CARD_CHECK_ARGS)

bench: setup
	$(BIN)/python benchmarks/recommend_sweep.py

clean:
	rm -rf runs .pytest_cache .ruff_cache .hypothesis
