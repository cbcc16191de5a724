# parallax: `serve` (the default) runs each suite on its cron schedule; `run` is the one-shot.
# Mount the config, fixtures and snapshots read-only under /work, give /work/runs a volume, and
# name the config (PARALLAX_CONFIG defaults to /work/config/parallax.toml):
#   docker run -d --name parallax -v "$PWD/config:/work/config:ro" -v "$PWD/fixtures:/work/fixtures:ro" \
#     -v "$PWD/snapshots:/work/snapshots:ro" -v parallax-runs:/work/runs \
#     -e PARALLAX_CONFIG=/work/config/nightly.toml -e REF_BASE_URL -e REF_MODEL -e REF_API_KEY \
#     -e CAND_BASE_URL -e CAND_MODEL -e CAND_API_KEY parallax

# --- build: a virtualenv from the hash-pinned lock, then parallax itself (no other deps) ---
FROM python:3.11-slim AS build
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
FROM python:3.11-slim
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
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["parallax", "health"]
ENTRYPOINT ["parallax"]
CMD ["serve"]
