# Capstan appliance image: build the single binary, run it as a non-root user beside clamd.
# Build: docker build -t capstan .
# Run:   docker run -d --name capstan -p 8080:8080 -v capstan-data:/data -v capstan-backups:/backups \
#          -v clamav-signatures:/var/lib/clamav capstan          (or: docker compose up -d)
# The admin token of the first start: docker logs capstan. See docs/operations.md ("Docker").

FROM oven/bun:1.4.5 AS build
WORKDIR /src
COPY package.json bun.lock ./
RUN bun install --frozen-lockfile --production
COPY tsconfig.json ./
COPY src ./src
COPY migrations ./migrations
RUN bun build --compile --no-compile-autoload-dotenv --no-compile-autoload-bunfig src/main.ts src/db/checkpointer.ts --outfile /out/capstan

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends clamav-daemon ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 capstan \
 && useradd --system --uid 10001 --gid 10001 --home /data --shell /usr/sbin/nologin capstan \
 && usermod -a -G clamav capstan \
 && mkdir -p /run/clamav /var/lib/clamav /var/log/clamav \
 && rm -f /var/lib/clamav/*.cvd /var/lib/clamav/*.cld \
 && chown clamav:capstan /run/clamav /var/lib/clamav /var/log/clamav \
 && chmod 2775 /run/clamav /var/lib/clamav /var/log/clamav \
 && mkdir -p /data /backups && chown capstan:capstan /data /backups && chmod 0700 /data /backups
COPY --from=build /out/capstan /usr/local/bin/capstan
COPY docker/entrypoint.sh /usr/local/bin/capstan-entrypoint
ENV CAPSTAN_DATA_DIR=/data \
    CAPSTAN_BACKUP_DIR=/backups \
    CAPSTAN_HOST=0.0.0.0 \
    CAPSTAN_PORT=8080 \
    CAPSTAN_CLAMD=unix:/run/clamav/clamd.ctl
# the signatures on a volume of their own: downloaded once, updated in place, kept across upgrades
VOLUME ["/data", "/backups", "/var/lib/clamav"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s CMD ["/usr/local/bin/capstan", "healthcheck"]
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/capstan-entrypoint"]
