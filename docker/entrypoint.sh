#!/bin/sh
# Starts Capstan at once and ClamAV beside it in the background: the signatures live on the
# /var/lib/clamav volume, so freshclam downloads them once and then only updates them; a start
# without internet serves with the signatures it has (uploads answer 503 scanner_unavailable until
# clamd has some). Runs as root (then Capstan drops to the capstan user) or as that user itself
# (docker run --user 10001:10001).
set -e

clamav() {
  # first signatures: freshclam until it has them (offline: try again every 10 minutes)
  until ls /var/lib/clamav/*.cvd /var/lib/clamav/*.cld >/dev/null 2>&1; do
    if ! freshclam --quiet --stdout; then
      echo "capstan-entrypoint: no ClamAV signatures yet (freshclam could not download them); uploads answer 503 scanner_unavailable until they arrive; trying again in 10 minutes" >&2
      sleep 600
    fi
  done
  clamd
  # then updates in the background, a few times a day (clamd reloads them by itself)
  freshclam --daemon --checks="${CAPSTAN_FRESHCLAM_CHECKS:-4}" --quiet || echo "capstan-entrypoint: freshclam could not start; signatures will not be updated" >&2
}

if [ "${CAPSTAN_START_CLAMD:-true}" = "true" ]; then
  clamav &
fi

if [ "$(id -u)" = "0" ]; then
  exec setpriv --reuid=capstan --regid=capstan --init-groups /usr/local/bin/capstan serve
fi
exec /usr/local/bin/capstan serve
