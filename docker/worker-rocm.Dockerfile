# A ROCm GPU worker: one container per GPU, pinned with ROCR_VISIBLE_DEVICES (docker-compose.yml).
# Run with --device /dev/kfd --device /dev/dri and the video/render groups (group_add in compose).
ARG ROCM_VERSION=6.2
FROM rocm/dev-ubuntu-22.04:${ROCM_VERSION}
ARG ROCM_VERSION
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3-pip gcc g++ \
 && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:/opt/rocm/bin:$PATH HIP_PLATFORM=amd PYTHONUNBUFFERED=1 TUNEBASE_HOME=/var/lib/tunebase
WORKDIR /app
COPY pyproject.toml README.md* ./
COPY service service
COPY workers workers
COPY kernels kernels
COPY migrations migrations
COPY alembic.ini ./
# hip-python must match the ROCm runtime of the image (its wheels are versioned per ROCm release).
RUN pip install --no-cache-dir -e . \
 && pip install --no-cache-dir -i https://test.pypi.org/simple "hip-python~=${ROCM_VERSION}.0"
RUN mkdir -p /var/lib/tunebase
CMD ["tunebase", "worker", "--gpu", "0", "--arch", "gfx906"]
