# The API, the beat scheduler, the migrate job and CPU (maintenance/host) workers share this image.
# BASE_IMAGE: the public Python image by default; on a machine without a registry, the plain Debian image that
# scripts/local-base-image.sh makes (Debian's python3 is 3.11 too). Classic builder only (no BuildKit syntax).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
# cc/c++ stay in the image: the host backend compiles its C kernels at run time.
RUN set -eux; pkgs="gcc g++ libc6-dev"; \
    command -v python3 >/dev/null || pkgs="$pkgs python3 python3-venv"; \
    apt-get update; apt-get install -y --no-install-recommends $pkgs; rm -rf /var/lib/apt/lists/*; \
    python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TUNEBASE_HOME=/var/lib/tunebase
WORKDIR /app
# Dependencies in their own layer, keyed on pyproject.toml only: a source change does not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY README.md alembic.ini ./
COPY service service
COPY workers workers
COPY kernels kernels
COPY migrations migrations
# The code stays root-owned and read-only to the service user; only TUNEBASE_HOME is writable.
RUN pip install --no-deps -e . \
 && useradd --system --create-home --home-dir /var/lib/tunebase --shell /usr/sbin/nologin tunebase \
 && install -d -o tunebase -g tunebase /var/lib/tunebase/artifacts
USER tunebase
EXPOSE 8000
CMD ["tunebase", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-migrate"]
