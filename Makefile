# sweeper: `make demo` and `make test` work on a fresh clone (Debian/Ubuntu, Python >= 3.10).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The test database role; a throwaway credential for the local test server only.
PG_TEST_URL ?= postgresql://sweeper:sweeper-test-pw@127.0.0.1:5432/postgres
export SWEEPER_TEST_PG ?= $(PG_TEST_URL)

.PHONY: help install install-test install-docs demo test lint docs postgres browser bench chaos clean cluster-up cluster-down cluster-build cluster-images node-packages mutate

help:
	@echo "make demo     create .venv, install, run a real sweep (SQLite + local processes)"
	@echo "make test     install test deps, start PostgreSQL (and Chromium), run the whole suite"
	@echo "make lint     ruff + mypy"
	@echo "make mutate   mutation testing (mutmut) of the index protocol's decisions; minutes, not in test"
	@echo "make docs     the documentation site (MkDocs, Material theme), built with --strict into site/"
	@echo "make bench    benchmarks side by side with plain Optuna (PostgreSQL)"
	@echo "make chaos    the fault-injection sweep at a bigger size (CHAOS_MODE=kill|database)"
	@echo "make cluster-up    build (once) and start the local Kubernetes control plane; KUBECONFIG=.cluster/kubeconfig"
	@echo "make cluster-down  stop it and remove its state"
	@echo "make cluster-images  the cluster's container images (Debian base, trial runner, PostgreSQL, pause) in .cluster/images"

$(VENV)/bin/activate:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch is pinned to 2.13.0 in setup.cfg (a CPU build ships with these machines; an unpinned
# torch would pull gigabytes of CUDA wheels). The stamp re-installs when setup.cfg changes.
$(VENV)/.installed: setup.cfg pyproject.toml | $(VENV)/bin/activate
	$(PIP) install -q -e . 'python-dateutil<3'
	@touch $@

$(VENV)/.installed-test: setup.cfg pyproject.toml | $(VENV)/bin/activate
	$(PIP) install -q -e '.[test,dev]' 'python-dateutil<3'
	@touch $(VENV)/.installed $@

$(VENV)/.installed-docs: setup.cfg pyproject.toml | $(VENV)/bin/activate
	$(PIP) install -q -e '.[docs]' 'python-dateutil<3'
	@touch $(VENV)/.installed $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

install-docs: $(VENV)/.installed-docs

demo: install
	$(VENV)/bin/sweeper run search_spaces/digits_tpe.yaml
	@echo
	$(VENV)/bin/sweeper best digits-tpe --format table
	@echo
	@echo "Open the dashboard:  $(VENV)/bin/sweeper dashboard digits-tpe   (http://127.0.0.1:8080)"

# PostgreSQL for the tests: install if absent, start the cluster, create the test role.
postgres:
	@command -v pg_ctlcluster >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; }
	@ver=$$(pg_lsclusters -h | awk 'NR==1{print $$1}'); name=$$(pg_lsclusters -h | awk 'NR==1{print $$2}'); \
		pg_lsclusters -h | awk 'NR==1{print $$4}' | grep -q online || $(SUDO) pg_ctlcluster $$ver $$name start
	@for i in $$(seq 30); do $(SUDO) su postgres -c "psql -qtAc 'select 1'" >/dev/null 2>&1 && break; sleep 1; done
	@# The local cluster's pods reach this server at their gateway, 10.250.N.1 (tests/cluster/netns.py):
	@# listen there too, and let the test role in from those addresses (with its password).
	@psql() { $(SUDO) su postgres -c "psql -qtAc \"$$1\""; }; hba=$$(psql 'SHOW hba_file'); \
		grep -q '^host all sweeper 10.250.0.0/16' $$hba || { echo 'host all sweeper 10.250.0.0/16 scram-sha-256' | \
			$(SUDO) tee -a $$hba >/dev/null && psql 'SELECT pg_reload_conf()' >/dev/null; }; \
		if [ "$$(psql 'SHOW listen_addresses')" != '*' ]; then psql "ALTER SYSTEM SET listen_addresses = '*'" && \
			$(SUDO) pg_ctlcluster $$(pg_lsclusters -h | awk 'NR==1{print $$1, $$2}') restart && \
			for i in $$(seq 30); do psql 'select 1' >/dev/null 2>&1 && break; sleep 1; done; fi
	@$(SUDO) su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname='sweeper'\"" | grep -q 1 || \
		$(SUDO) su postgres -c "psql -qc \"CREATE ROLE sweeper LOGIN CREATEDB PASSWORD 'sweeper-test-pw'\""
	@echo "PostgreSQL ready"

# Debian's Chromium + driver for the dashboard browser test (never a downloaded browser).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null; }

# The Kubernetes tests start the local control plane for the session (unless `make cluster-up`
# already did) and stop it after; then no process of it may be left running.
test: install-test postgres browser cluster-build cluster-images
	@was_up=$$($(PY) -m tests.cluster status 2>/dev/null | grep -x up); \
	$(VENV)/bin/pytest; rc=$$?; \
	if [ -z "$$was_up" ]; then $(PY) -m tests.cluster leaks || rc=1; fi; exit $$rc

lint: install-test
	$(VENV)/bin/ruff check sweeper trial_runner tests benchmarks tools docs
	$(VENV)/bin/mypy

# Mutation testing (issue 26; docs/development.md). mutmut mutates the files in pyproject.toml's
# [tool.mutmut] only_mutate inside mutants/ (the tree is never touched) and runs each mutant
# against the fast unit tests named there. MUTANTS picks the mutants to run: all of
# protocol.py, messages.py and stop.py (pure decisions), the index store's steps on SQLite
# (sweeper/study/sql/index.py), runner.py's state table (acquire, the rows, and the retry
# decisions). A module added to only_mutate needs its `module.*` here too.
MUTANTS ?= 'sweeper.protocol.*' 'sweeper.messages.*' 'sweeper.study.stop.*' \
	'sweeper.study.sql.index.*' \
	$(foreach f,acquire _recorded_stop _already_done _first_attempt _running _next_attempt \
	  _final _exit_code_of,'trial_runner.runner.x_$(f)__*')
mutate: install-test postgres
	rm -rf mutants
	@start=$$(date +%s); $(VENV)/bin/mutmut run --max-children $$(nproc) $(MUTANTS) >mutants.log 2>&1; \
	rc=$$?; tail -c 300 mutants.log | tr '\r' '\n' | tail -1; \
	echo "mutmut took $$(( $$(date +%s) - start ))s (log: mutants.log)"; \
	$(VENV)/bin/mutmut results; exit $$rc

# docs/hooks.py adds the pages generated from the code (CLI and spec references). Material 9.7+
# prints a banner about its end of life on every build; NO_MKDOCS_2_WARNING silences only that.
docs: install-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: install-test postgres
	$(PY) -m benchmarks.run $(BENCH_ARGS)

# What the real node runs and the image builds use, from Debian's packages: containerd and runc,
# the CNI plugins, iptables and conntrack for kube-proxy, debootstrap and buildah for the images.
NODE_PACKAGES := containerd runc containernetworking-plugins iptables conntrack debootstrap buildah
node-packages:
	@for c in containerd runc ctr iptables conntrack debootstrap buildah nsenter; do command -v $$c >/dev/null || missing=1; done; \
		[ -x /usr/lib/cni/bridge ] || missing=1; \
		[ -z "$$missing" ] || { $(SUDO) apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(NODE_PACKAGES) >/dev/null; }

# The local Kubernetes cluster's binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, the kubelet, kube-proxy, CoreDNS, the fake GPU device plugin, Kueue, JobSet)
# built from their own Go modules.
cluster-build:
	@tools/cluster/build.sh

# The local cluster's container images as docker archives in .cluster/images, for `ctr -n k8s.io
# images import`: a Debian bookworm base (debootstrap), the trial runner (./Dockerfile on it,
# without torch), PostgreSQL (Debian's, with the official image's contract) and the pause image.
# Debian's packages and PyPI only, no registry; needs root (debootstrap, buildah). A no-op when
# nothing changed; a code change rebuilds the trial runner's code layer only.
cluster-images: node-packages
	@$(SUDO) tools/cluster/images.sh >/dev/null

cluster-up: install-test node-packages
	@$(PY) -m tests.cluster up

cluster-down:
	@if [ -x $(PY) ]; then $(PY) -m tests.cluster down; else echo "cluster-down: no .venv, nothing to stop"; fi

# CHAOS_MODE=kill (runners SIGKILLed) or database (faults injected between sweeper and PostgreSQL)
CHAOS_MODE ?= kill
chaos: install-test postgres
	$(PY) -m tests.support.chaos --mode $(CHAOS_MODE) $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) .sweeper sweeps.db* *.egg-info .pytest_cache .mypy_cache .ruff_cache site mutants mutants.log
