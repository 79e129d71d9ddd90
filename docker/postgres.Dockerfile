# Postgres from Debian's packages, for machines that cannot pull `postgres:16` (no registry reachable).
# Behaves like the official image for what docker-compose.yml uses: POSTGRES_USER/PASSWORD/DB on first start,
# data in /var/lib/postgresql/data (a volume), pg_isready for the health check. Debian 12 ships PostgreSQL 15.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# No cluster from the package's postinst: the entrypoint makes one in the volume on first start.
RUN set -eux; mkdir -p /etc/postgresql-common; \
    echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf; \
    apt-get update; apt-get install -y --no-install-recommends postgresql-15; rm -rf /var/lib/apt/lists/*; \
    install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data; \
    install -d -o postgres -g postgres -m 2775 /var/run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY docker/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
USER postgres
VOLUME /var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
CMD ["postgres"]
