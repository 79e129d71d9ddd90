# A ROCm GPU worker: one container per GPU, pinned with ROCR_VISIBLE_DEVICES (docker-compose.yml).
# Run with --device /dev/kfd --device /dev/dri and the video/render groups (group_add in compose).
# BASE_IMAGE: AMD's ROCm image by default (HIP runtime, hipcc, rocprofv3). Where no registry is reachable, the
# Debian base of scripts/local-base-image.sh: Debian 12's ROCm 5.2 toolchain (hipcc, device libs, libamdhip64.so.5)
# compiles gfx906/gfx90a code objects, ziglang's clang gfx942/gfx950, but it has no ROCm 6 runtime for
# hip-python 6.2 and no profiler, so such an image compiles and analyses ISA, it does not time (docker/README.md).
ARG BASE_IMAGE=rocm/dev-ubuntu-22.04:6.2
FROM ${BASE_IMAGE}
RUN set -eux; apt-get update; \
    if [ -d /opt/rocm ]; then pkgs="python3.11 python3.11-venv gcc g++"; py=python3.11; \
    else pkgs="python3 python3-venv gcc g++ hipcc rocm-device-libs libamdhip64-dev llvm-15"; py=python3; fi; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs; \
    rm -rf /var/lib/apt/lists/*; $py -m venv /opt/venv
ENV PATH=/opt/venv/bin:/opt/rocm/bin:$PATH HIP_PLATFORM=amd PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 TUNEBASE_HOME=/var/lib/tunebase
WORKDIR /app
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt
# hip-python's wheels are versioned per ROCm release; pin the one matching the base image's ROCm (PyPI).
ARG HIP_PYTHON_VERSION=6.2.0.499.16
RUN pip install "hip-python==${HIP_PYTHON_VERSION}"
COPY README.md alembic.ini ./
COPY service service
COPY workers workers
COPY kernels kernels
COPY migrations migrations
RUN pip install --no-deps -e . \
 && useradd --system --create-home --home-dir /var/lib/tunebase --shell /usr/sbin/nologin tunebase \
 && usermod -a -G video tunebase && (getent group render >/dev/null && usermod -a -G render tunebase || true) \
 && install -d -o tunebase -g tunebase /var/lib/tunebase/artifacts
USER tunebase
CMD ["tunebase", "worker", "--gpu", "0", "--arch", "gfx906"]
