# A CUDA GPU worker: one container per GPU, pinned with CUDA_VISIBLE_DEVICES (docker-compose.yml).
# Needs the NVIDIA container toolkit on the host (deploy.resources.reservations.devices in compose).
ARG CUDA_VERSION=12.6.3
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3-pip gcc g++ \
 && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 TUNEBASE_HOME=/var/lib/tunebase CUDA_DEVICE_ORDER=PCI_BUS_ID
WORKDIR /app
COPY pyproject.toml README.md* ./
COPY service service
COPY workers workers
COPY kernels kernels
COPY migrations migrations
COPY alembic.ini ./
# cuda-python pinned to the toolkit's major.minor
RUN pip install --no-cache-dir -e . && pip install --no-cache-dir "cuda-python~=12.6.0"
RUN mkdir -p /var/lib/tunebase
CMD ["tunebase", "worker", "--gpu", "0", "--arch", "sm_90"]
