#!/usr/bin/env bash
# Start a throw-away Redis server on 127.0.0.1:63790 for the journal-storage sweep tests (no persistence,
# loopback only, 4096 databases so parallel tests each take an empty one). Installs Debian's redis-server
# first when it is missing. Prints the URL to use: redis://127.0.0.1:63790
set -euo pipefail
PORT=${PE_REDIS_PORT:-63790}
if ! command -v redis-server >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
if ! redis-cli -h 127.0.0.1 -p "$PORT" ping >/dev/null 2>&1; then
  redis-server --port "$PORT" --bind 127.0.0.1 --protected-mode yes --save '' --appendonly no \
    --databases 4096 --daemonize yes --logfile /tmp/pe-redis.log >/dev/null
  for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
echo "redis://127.0.0.1:$PORT"
