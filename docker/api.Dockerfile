# The API, the beat scheduler, the migrate job and CPU (maintenance/host) workers share this image.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc g++ libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md* ./
COPY service service
COPY workers workers
COPY kernels kernels
COPY migrations migrations
COPY alembic.ini ./
RUN pip install --no-cache-dir -e .
ENV TUNEBASE_HOME=/var/lib/tunebase PYTHONUNBUFFERED=1
RUN useradd --system --create-home --home-dir /var/lib/tunebase tunebase
USER tunebase
EXPOSE 8000
CMD ["tunebase", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-migrate"]
