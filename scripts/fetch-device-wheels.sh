#!/usr/bin/env bash
# Fetch the exact wheels a GPU run on the device machine (NVIDIA H200 image: Python 3.12, x86-64, no
# network) needs beside what its image already holds, into the ignored folder .whl/ that the run carries.
# The pins are pyproject.toml's; packages the image already has (numpy, jinja2, typer, rich, httpx,
# msgpack, prometheus-client, cuda-bindings, pytest, ...) are not fetched, so nothing shadows them.
# Usage: scripts/fetch-device-wheels.sh   (then: device run with carry [".whl"], see bench/device_*.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.whl
mkdir -p "$dest"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || true  # .gitignore already lists /.whl/
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64)
wheels=(
  gguf==0.19.0                 # the reference quantizer (build_problem)
  sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 greenlet==3.5.6
  pydantic==2.14.4 pydantic-core==2.50.5 pydantic-settings==2.16.3 python-dotenv==1.2.4
  annotated-types==0.8.0 typing-inspection==0.4.5
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34 opentelemetry-api==1.45.2
  typing-extensions==4.16.0 annotated-doc==0.0.7
  pyelftools==0.33
  threadpoolctl==3.8.0         # service.tables: one BLAS thread for the table models
  cupti-python==13.0.1         # CUPTI activity records: per-dispatch GPU time
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$dest" "${wheels[@]}"
ls -1 "$dest"
du -sh "$dest"
