#!/usr/bin/env bash
# Start a throw-away Redis server on 127.0.0.1:63790 for the journal-storage sweep tests (no persistence,
# loopback only, 4096 databases so parallel tests each take an empty one, a password). Installs Debian's
# redis-server first when it is missing. The password is generated once into /tmp/pe-redis.password (0600)
# and reused; a server already on the port without it (an older instance) is shut down and started again with it.
# Prints the URL to use: redis://:<password>@127.0.0.1:63790
set -euo pipefail
PORT=${PE_REDIS_PORT:-63790}
PASSWORD_FILE=${PE_REDIS_PASSWORD_FILE:-/tmp/pe-redis.password}
if ! command -v redis-server >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

source "$(dirname "$0")/kept_password.sh"  # kept_password FILE: the server's password, made once

# redis-cli on the port with the password $1 ('' for none; in the environment, not in `ps`), then the command
cli() {
  local password=$1
  shift
  if [ -n "$password" ]; then
    REDISCLI_AUTH=$password redis-cli -h 127.0.0.1 -p "$PORT" "$@" 2>/dev/null
  else
    env -u REDISCLI_AUTH redis-cli -h 127.0.0.1 -p "$PORT" "$@" 2>/dev/null
  fi
}

PASSWORD=$(kept_password "$PASSWORD_FILE")
URL="redis://:$PASSWORD@127.0.0.1:$PORT"
if [ "$(cli "$PASSWORD" ping || true)" = PONG ] && [ "$(cli "" ping || true)" != PONG ]; then
  echo "$URL"
  exit 0
fi
if [ "$(cli "" ping || true)" = PONG ]; then  # an older instance without a password
  cli "" shutdown nosave >/dev/null || true
elif cli "" ping >/dev/null; then  # it answers, with another password
  echo "error: a Redis server on 127.0.0.1:$PORT wants another password than the one in $PASSWORD_FILE;" \
    "shut it down (redis-cli -p $PORT -a <its password> shutdown nosave)" >&2
  exit 1
fi
for _ in $(seq 50); do cli "" ping >/dev/null || break; sleep 0.1; done
# the password is read from stdin (`-`), so it never shows in `ps`
printf 'requirepass %s\n' "$PASSWORD" | redis-server - --port "$PORT" --bind 127.0.0.1 --protected-mode yes \
  --save '' --appendonly no --databases 4096 --daemonize yes --logfile /tmp/pe-redis.log >/dev/null
for _ in $(seq 50); do [ "$(cli "$PASSWORD" ping || true)" = PONG ] && break; sleep 0.1; done
echo "$URL"
