# fluxnode image: the node agent (fluxnode agent), the brokers it starts, the binder and
# the CLI. Built from this checkout: docker build -t fluxnode:dev .   (or make image)
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fluxnode/ fluxnode/
COPY agent/ agent/
COPY broker_conf/ broker_conf/
COPY scheduler/ scheduler/
COPY templates/ templates/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="fluxnode" \
      org.opencontainers.image.description="Flux-style broker overlay and graph scheduler for Kubernetes"
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels fluxnode \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --home-dir /var/lib/fluxnode --shell /usr/sbin/nologin fluxnode
ENV PYTHONUNBUFFERED=1
# Non-root by default (CLI, binder). The agent DaemonSet runs as root on purpose: it writes
# host paths (/etc/fluxnode, /run/fluxnode, /usr/local/bin) and reads node hardware.
USER 10001
ENTRYPOINT []
CMD ["fluxnode", "--help"]
