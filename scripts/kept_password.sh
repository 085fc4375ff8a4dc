#!/usr/bin/env bash
# Sourced by scripts/start_postgres.sh and scripts/start_redis.sh.
# The password in $1, made once (0600, this user's); refuses a file someone else could read or swap.
kept_password() {
  local file=$1 made
  if [ ! -e "$file" ]; then
    made=$(mktemp "$file.XXXXXX")  # 0600
    head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$made"
    mv -n "$made" "$file" || true  # -n: a file made meanwhile by another run wins
    rm -f "$made"
  fi
  if [ -L "$file" ] || [ ! -f "$file" ] || [ "$(stat -c %u:%a "$file")" != "$(id -u):600" ]; then
    echo "error: $file must be a plain file of user $(id -un) with mode 600 (it holds the server's password)" >&2
    exit 1
  fi
  cat "$file"
}
