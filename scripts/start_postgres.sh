#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on 127.0.0.1:54329 for the multi-host sweep test (loopback only, data in
# /tmp, scram-sha-256 password auth). Installs Debian's postgresql first when it is missing.
# The password is generated once into $PE_PG_DATA.password (0600; /tmp/pe-postgres.password: initdb wants an
# empty data folder) and reused; a server already on the port that lets a client in without it (an older
# trust-auth instance) is stopped and made again with it.
# Prints the storage URL to use: postgresql://postgres:<password>@127.0.0.1:54329/postgres
set -euo pipefail
PORT=${PE_PG_PORT:-54329}
DATA=${PE_PG_DATA:-/tmp/pe-postgres}
PASSWORD_FILE=${PE_PG_PASSWORD_FILE:-$DATA.password}
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)

source "$(dirname "$0")/kept_password.sh"  # kept_password FILE: the server's password, made once

# psql `select 1` on the port, with the password ($1) or none (''); ~/.pgpass and $PGPASSWORD ignored.
answers() {
  if [ -n "$1" ]; then
    PGPASSWORD=$1 PGPASSFILE=/dev/null "$PGBIN/psql" -w -qAt -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
      -c 'select 1' >/dev/null 2>&1
  else
    env -u PGPASSWORD PGPASSFILE=/dev/null "$PGBIN/psql" -w -qAt -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
      -c 'select 1' >/dev/null 2>&1
  fi
}

PASSWORD=$(kept_password "$PASSWORD_FILE")
if "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
  if answers "$PASSWORD" && ! answers ""; then
    echo "postgresql://postgres:$PASSWORD@127.0.0.1:$PORT/postgres"
    exit 0
  fi
  # an older instance (trust auth, or made with another password): stop it and make it again
  if ! su postgres -c "$PGBIN/pg_ctl -D $DATA -m fast -w stop" >/dev/null 2>&1; then
    echo "error: a PostgreSQL server on 127.0.0.1:$PORT lets a client in without the password in" \
      "$PASSWORD_FILE and its data is not in $DATA; stop it (pg_ctl -D <its data> stop)" >&2
    exit 1
  fi
fi
rm -rf "$DATA" && mkdir -p "$DATA" && chown postgres "$DATA"
PWFILE=$(mktemp) && cp "$PASSWORD_FILE" "$PWFILE" && chown postgres "$PWFILE"  # initdb runs as postgres
su postgres -c "$PGBIN/initdb -D $DATA -A scram-sha-256 -U postgres --pwfile=$PWFILE" >/dev/null
rm -f "$PWFILE"
su postgres -c "$PGBIN/pg_ctl -D $DATA -l $DATA/server.log -w -o '-p $PORT -k /tmp -c listen_addresses=127.0.0.1' start" >/dev/null
echo "postgresql://postgres:$PASSWORD@127.0.0.1:$PORT/postgres"
