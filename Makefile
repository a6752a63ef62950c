# fluxnode: `make demo` installs and runs an 8-broker overlay; `make test` runs lint and tests.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
IMAGE   ?= fluxnode:dev
CLUSTER ?= fluxnode

.PHONY: install system-deps lint test demo bench image kind-up kind-load deploy undeploy e2e-kind clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# openssh-server is needed by the ssh:// proxy test; installed when missing and we are root.
system-deps:
	@if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing openssh-server (for the ssh:// proxy test)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; \
	  else echo "note: sshd not found and cannot install it; the ssh:// proxy test will be skipped"; fi; \
	fi

lint: install
	$(BIN)/ruff check .

test: install system-deps lint
	$(BIN)/pytest -q

demo: install
	$(BIN)/fluxnode start --test-size 8 -- $(BIN)/fluxnode resource list

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
