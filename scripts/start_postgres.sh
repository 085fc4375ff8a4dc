#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on 127.0.0.1:54329 for the multi-host sweep test (trust auth
# on loopback only, data in /tmp). Installs Debian's postgresql first when it is missing.
# Prints the storage URL to use: postgresql://postgres@127.0.0.1:54329/postgres
set -euo pipefail
PORT=${PE_PG_PORT:-54329}
DATA=${PE_PG_DATA:-/tmp/pe-postgres}
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
if ! "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
  rm -rf "$DATA" && mkdir -p "$DATA" && chown postgres "$DATA"
  su postgres -c "$PGBIN/initdb -D $DATA -A trust -U postgres" >/dev/null
  su postgres -c "$PGBIN/pg_ctl -D $DATA -l $DATA/server.log -w -o '-p $PORT -k /tmp -c listen_addresses=127.0.0.1' start" >/dev/null
fi
echo "postgresql://postgres@127.0.0.1:$PORT/postgres"
