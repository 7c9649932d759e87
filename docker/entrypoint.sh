#!/bin/sh
# Starts clamd (signatures come from freshclam in the image or a mounted database), then runs
# Capstan as the unprivileged capstan user. Capstan serves even while clamd is still loading;
# uploads answer 503 scanner_unavailable until it is ready.
set -e
if [ "${CAPSTAN_START_CLAMD:-true}" = "true" ]; then
  freshclam --quiet --stdout || echo "freshclam failed; clamd will use the signatures it has"
  clamd &
fi
exec setpriv --reuid=capstan --regid=capstan --init-groups /usr/local/bin/capstan serve
