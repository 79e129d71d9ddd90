# A CUDA GPU worker: one container per GPU, pinned by docker-compose.yml (NVIDIA container toolkit on the host).
# CUDA's user space comes from NVIDIA's pip wheels (NVRTC, CUPTI, runtime; the versions the H200 worker ran,
# bench/results/env-h200-2026-11-30.log), so no nvidia/cuda image is pulled and the image builds on the same
# base as the API; the driver (libcuda) is mounted from the host by the toolkit at run time.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
# The first steps repeat docker/api.Dockerfile word for word, so both images share those cached layers.
RUN set -eux; pkgs="gcc g++ libc6-dev"; \
    command -v python3 >/dev/null || pkgs="$pkgs python3 python3-venv"; \
    apt-get update; apt-get install -y --no-install-recommends $pkgs; rm -rf /var/lib/apt/lists/*; \
    python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TUNEBASE_HOME=/var/lib/tunebase
WORKDIR /app
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt
# The `cuda` extra (cuda-bindings, cupti-python) and the libraries they load.
ARG NVRTC_VERSION=13.0.88
ARG CUPTI_VERSION=13.0.85
ARG CUDART_VERSION=13.0.96
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['cuda']))" \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt "nvidia-cuda-nvrtc==${NVRTC_VERSION}" \
      "nvidia-cuda-cupti==${CUPTI_VERSION}" "nvidia-cuda-runtime==${CUDART_VERSION}" \
 && rm /tmp/requirements.txt
COPY README.md alembic.ini ./
COPY service service
COPY workers workers
COPY kernels kernels
COPY migrations migrations
RUN pip install --no-deps -e . \
 && useradd --system --create-home --home-dir /var/lib/tunebase --shell /usr/sbin/nologin tunebase \
 && install -d -o tunebase -g tunebase /var/lib/tunebase/artifacts
ENV CUDA_DEVICE_ORDER=PCI_BUS_ID NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER tunebase
CMD ["tunebase", "worker", "--gpu", "0", "--arch", "sm_90"]
