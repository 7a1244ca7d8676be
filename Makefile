# mtt-train-ops: `make plan` (set up, then plan the example cluster), `make test`.
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)
PLAYBOOKS := $(wildcard playbooks/*.yml) $(wildcard *.yml)

.PHONY: setup plan test test-fast lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

## The main job on the built-in default: plan Llama3-8B on the example two-node S5000 cluster.
plan: setup
	$(BIN)/ansible-playbook playbooks/plan.yml -e tp=1 -e pp=2 -e recommend=true

## Everything CI runs: lint, then every test.
test: setup lint
	$(BIN)/pytest -q tests

## Unit tests only (no ansible-playbook runs).
test-fast: setup
	$(BIN)/pytest -q tests/unit

lint: setup
	$(BIN)/ruff check plugins tests benchmarks tools
	$(BIN)/ruff format --check plugins tests benchmarks tools
	for p in $(PLAYBOOKS); do $(BIN)/ansible-playbook --syntax-check "$$p" || exit 1; done
	$(BIN)/ansible-lint --profile production --offline playbooks roles provision.yml

bench: setup
	$(BIN)/python benchmarks/recommend_sweep.py

clean:
	rm -rf runs .pytest_cache .ruff_cache .hypothesis
