# fluxnode: `make demo` installs and runs an 8-broker overlay; `make test` runs lint, import
# contracts, the docs build and the tests; `make docs` builds the documentation site.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
IMAGE   ?= fluxnode:dev
CLUSTER ?= fluxnode

.PHONY: install system-deps lint imports docs test demo bench fuzz fuzz-message fuzz-jobspec image kind-up kind-load deploy undeploy e2e-kind clean

# the editable install builds the C loops in place (scheduler/traversers/_*.c, _slots.h):
# a change to them reinstalls
$(STAMP): pyproject.toml $(wildcard scheduler/traversers/_*.c scheduler/traversers/_*.h)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# openssh-server is needed by the ssh:// proxy test, kubectl (Debian's kubernetes-client) by
# the tests that run kubectl against the API emulator; installed when missing and we are root.
system-deps:
	@if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing openssh-server (for the ssh:// proxy test)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; \
	  else echo "note: sshd not found and cannot install it; the ssh:// proxy test will be skipped"; fi; \
	fi
	@if ! command -v kubectl >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing kubernetes-client (kubectl, for the kubectl tests)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null; \
	  else echo "note: kubectl not found and cannot install it; the kubectl tests will be skipped"; fi; \
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
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: install system-deps lint imports docs
	$(BIN)/pytest -q

# Coverage-guided fuzzing (atheris, tests/fuzz/README.md): FUZZ_SECONDS per target, the
# corpus kept in build/fuzz/<target>; findings are written as crash-*/timeout-* in build/fuzz.
FUZZ_SECONDS ?= 900
FUZZ = mkdir -p build/fuzz/$(1) && cd build/fuzz && $(CURDIR)/$(BIN)/python \
  $(CURDIR)/tests/fuzz/fuzz_$(1).py -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
  -rss_limit_mb=2048 $(1)
fuzz: fuzz-message fuzz-jobspec

fuzz-message: install
	$(call FUZZ,message)

fuzz-jobspec: install
	$(call FUZZ,jobspec)

demo: install
	$(BIN)/fluxnode start --test-size 8 -- $(BIN)/fluxnode resource list

# --- Kubernetes (installer): need docker, kind and kubectl; nothing here runs without them.
DOCKER  ?= docker
KIND    ?= kind
KUBECTL ?= kubectl

image:
	$(DOCKER) build -t $(IMAGE) .

kind-up:
	@$(KIND) get clusters 2>/dev/null | grep -qx '$(CLUSTER)' || \
	  $(KIND) create cluster --name $(CLUSTER) --config example/kind-config.yaml --wait 120s

kind-load: image
	$(KIND) load docker-image $(IMAGE) --name $(CLUSTER)

deploy:
	$(KUBECTL) apply -k daemonset/
	$(KUBECTL) -n fluxnode rollout status daemonset/fluxnode-agent --timeout=300s

undeploy:
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
