# syntax=docker/dockerfile:1
# fluxnode image: the node agent (fluxnode agent), the brokers it starts, the binder and
# the CLI. Built from this checkout: docker build -t fluxnode:dev .   (or make image)
#
# Layers: the dependencies are built and installed from pyproject.toml alone, before any
# source is copied, so editing the source rebuilds only the small fluxnode wheel and its
# install layer; the dependency layers stay cached until pyproject.toml changes.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# 1. dependency wheels, from [project].dependencies only
FROM ${PYTHON_IMAGE} AS deps
WORKDIR /deps
COPY pyproject.toml /src/pyproject.toml
RUN python -c "import tomllib, sys; sys.stdout.write('\n'.join(tomllib.load(open('/src/pyproject.toml', 'rb'))['project']['dependencies']) + '\n')" > requirements.txt \
    && pip wheel --no-cache-dir --wheel-dir /deps -r requirements.txt

# 2. the fluxnode wheel (no dependencies), from the source, with its compiled loops
#    (scheduler/traversers/_*.c): the slim image has the Python headers but no C
#    compiler, so this stage installs one; the final image does not need it
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fluxnode/ fluxnode/
COPY agent/ agent/
COPY broker_conf/ broker_conf/
COPY scheduler/ scheduler/
COPY templates/ templates/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /app .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="fluxnode" \
      org.opencontainers.image.description="Flux-style broker overlay and graph scheduler for Kubernetes"
RUN useradd --system --uid 10001 --home-dir /var/lib/fluxnode --shell /usr/sbin/nologin fluxnode
# dependencies first (cached apart from the source); bind mounts leave no wheels in the image
RUN --mount=type=bind,from=deps,source=/deps,target=/deps \
    pip install --no-cache-dir --no-index --find-links=/deps -r /deps/requirements.txt
RUN --mount=type=bind,from=build,source=/app,target=/app \
    pip install --no-cache-dir --no-index --no-deps /app/fluxnode-*.whl
ENV PYTHONUNBUFFERED=1
# Non-root by default (CLI, binder). The agent DaemonSet runs as uid 0 without any
# capability: it owns the host paths it writes (/etc/fluxnode, /run/fluxnode,
# /var/lib/fluxnode, /opt/fluxnode/bin).
USER 10001
ENTRYPOINT []
CMD ["fluxnode", "--help"]
