#!/usr/bin/env bash
# Install Debian's Chromium for the report's browser test (tests/compare/test_compare_report.py) when no Chromium is on
# PATH. Needs root and Debian's package registry; prints the browser's path.
set -euo pipefail
for name in chromium chromium-browser google-chrome google-chrome-stable headless_shell; do
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; exit 0; fi
done
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium
