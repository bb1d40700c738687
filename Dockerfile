# syntax=docker/dockerfile:1
# Two images from one file (see deploy/README.md):
#   docker build --target api     -t uis1-api .      the service, scheduler and adb server; no torch
#   docker build --target trainer -t uis1-trainer .  `uis1 retrain` / `uis1 train` with torch and DeepSpeed
# vLLM is not built here: run the official vLLM image (compose.yaml, deploy/k8s/vllm.yaml).
# Pin the base by digest for reproducible builds: --build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:...
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN useradd --create-home --uid 10001 --user-group uis1 \
    && mkdir -p /data \
    && chown uis1:uis1 /data
WORKDIR /app

# The project itself as a wheel, built once for both images.
FROM base AS wheel
COPY pyproject.toml README.md ./
COPY agent agent
COPY devices devices
COPY serve serve
COPY train train
RUN pip wheel --no-deps --wheel-dir /wheels .

# The service: the core lock only (FastAPI, SQLAlchemy, adbutils with its adb binary).
FROM base AS api-build
COPY requirements/core.lock /tmp/core.lock
RUN python -m venv /opt/venv \
    && pip install -r /tmp/core.lock
COPY --from=wheel /wheels /wheels
RUN pip install --no-deps /wheels/*.whl

# The trainer: torch (the CUDA build from the default index), transformers, peft, DeepSpeed.
FROM base AS trainer-build
COPY requirements/train.lock /tmp/train.lock
RUN python -m venv /opt/venv \
    && pip install -r /tmp/train.lock
COPY --from=wheel /wheels /wheels
RUN pip install --no-deps /wheels/*.whl

FROM base AS trainer
# g++ compiles DeepSpeed's CPU Adam on first use (learner.deepspeed.offload_optimizer).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*
COPY --from=trainer-build /opt/venv /opt/venv
ENV UIS1_STORE__SCREENSHOT_DIR=/data/screenshots \
    HF_HOME=/data/cache/huggingface \
    TRITON_CACHE_DIR=/data/cache/triton
USER 10001:10001
# A batch image (`uis1 retrain`, `uis1 scheduler`): no HTTP port to probe.
HEALTHCHECK NONE
ENTRYPOINT ["uis1"]
CMD ["retrain", "--help"]

FROM base AS api
COPY --from=api-build /opt/venv /opt/venv
# `adb` on PATH: the adb server sidecar runs this image with `adb -a -P 5037 nodaemon server`.
RUN ln -s "$(python -c 'import adbutils; print(adbutils.adb_path())')" /usr/local/bin/adb
ENV UIS1_HOST=0.0.0.0 \
    UIS1_PORT=8080 \
    UIS1_STORE__SCREENSHOT_DIR=/data/screenshots
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 CMD ["uis1", "healthcheck"]
ENTRYPOINT ["uis1"]
CMD ["serve"]
