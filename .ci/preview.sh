#!/usr/bin/env bash
# CI: the preview page in a real browser (tests/preview/browser_test.py): headless Chromium from
# Debian's packages driven by selenium through chromedriver, against `BINARY preview`.
# Usage: bash .ci/preview.sh BINARY   (e.g. target/debug/context-assembler)
# Installs Chromium and chromedriver (Debian packages) and selenium (pip) when missing. The test
# prints the temporary directory its screenshots are kept in.
set -euo pipefail

binary="${1:?usage: bash .ci/preview.sh BINARY}"
[[ "$binary" == /* ]] || binary="$PWD/$binary"
cd "$(dirname "$0")/.."
[[ -x "$binary" ]] || { echo "preview: not an executable: $binary" >&2; exit 1; }

if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
  sudo=""
  [[ "$(id -u)" == 0 ]] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium chromium-driver
fi
python3 -c 'import selenium' 2>/dev/null ||
  python3 -m pip install --quiet --disable-pip-version-check 'selenium==4.*'

python3 tests/preview/browser_test.py "$binary"
