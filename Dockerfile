# parallax: `serve` (the default) runs each suite on its cron schedule; `run` is the one-shot.
# Mount the config, fixtures and snapshots read-only under /work, give /work/runs a volume, and
# name the config (PARALLAX_CONFIG defaults to /work/config/parallax.toml):
#   docker run -d --name parallax -v "$PWD/config:/work/config:ro" -v "$PWD/fixtures:/work/fixtures:ro" \
#     -v "$PWD/snapshots:/work/snapshots:ro" -v parallax-runs:/work/runs \
#     -e PARALLAX_CONFIG=/work/config/nightly.toml -e REF_BASE_URL -e REF_MODEL -e REF_API_KEY \
#     -e CAND_BASE_URL -e CAND_MODEL -e CAND_API_KEY parallax

# The base of both stages, named once. Pin it by digest for builds that repeat (README, "The
# container": get the digest, then build with --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:...
# or write it here); a tag alone moves whenever Docker Hub rebuilds the image.
ARG PYTHON_IMAGE=python:3.11-slim

# --- build: a virtualenv from the hash-pinned lock, then parallax itself (no other deps) ---
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/parallax
COPY requirements.lock /tmp/requirements.lock
RUN /opt/parallax/bin/pip install --no-cache-dir --require-hashes --no-deps -r /tmp/requirements.lock
WORKDIR /src
COPY pyproject.toml README.md ./
COPY runner ./runner
RUN /opt/parallax/bin/pip install --no-cache-dir --no-deps . \
    && /opt/parallax/bin/parallax --version

# --- runtime: the venv only, a non-root user, runs on a volume ---
FROM ${PYTHON_IMAGE}
ENV PATH=/opt/parallax/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PARALLAX_CONFIG=/work/config/parallax.toml \
    PARALLAX_RUNS_DIR=/work/runs
RUN groupadd --system --gid 10001 parallax \
    && useradd --system --uid 10001 --gid parallax --home-dir /work --no-create-home parallax \
    && mkdir -p /work/runs \
    && chown parallax:parallax /work/runs
COPY --from=build /opt/parallax /opt/parallax
WORKDIR /work
VOLUME ["/work/runs"]
USER 10001:10001
# `health` finds the daemon by the pointer `serve` writes at start, whatever --config it was
# given, and reads only its heartbeat; in a one-shot `run` container no daemon ever started,
# so there is nothing to check (exit 0). Podman keeps this only with `build --format docker`.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["parallax", "health"]
ENTRYPOINT ["parallax"]
CMD ["serve"]
