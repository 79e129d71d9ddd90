# Redis from Debian's packages, for machines that cannot pull `redis:7` (no registry reachable).
# Like the official image: data in /data (a volume), protected mode off (the port is only on the compose
# network), redis-cli for the health check. Debian 12 ships Redis 7.0.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN set -eux; apt-get update; apt-get install -y --no-install-recommends redis-server; \
    rm -rf /var/lib/apt/lists/*; install -d -o redis -g redis -m 0750 /data
COPY docker/redis-entrypoint.sh /usr/local/bin/redis-entrypoint.sh
USER redis
WORKDIR /data
VOLUME /data
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/redis-entrypoint.sh"]
CMD ["redis-server"]
