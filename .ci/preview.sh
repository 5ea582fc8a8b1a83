#!/usr/bin/env bash
# CI: the preview page in a real browser (tests/preview/browser_test.py): headless Chromium from
# Debian's packages driven by selenium through chromedriver, against `BINARY preview`.
# Usage: bash .ci/preview.sh BINARY   (e.g. target/debug/context-assembler)
# Installs Chromium and chromedriver (Debian packages) and selenium (pip, else Debian's python3-selenium) when
# missing. The test prints the temporary directory its screenshots are kept in.
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
# selenium from pip into the Python on PATH (CI's pyenv Python, as `.ci/run` installs tiktoken); where pip
# cannot install (e.g. an externally managed system Python), Debian's python3-selenium and /usr/bin/python3.
python=python3
if ! python3 -c 'import selenium' 2>/dev/null &&
  ! python3 -m pip install --quiet --disable-pip-version-check 'selenium==4.*'; then
  echo "preview: pip could not install selenium; using Debian's python3-selenium" >&2
  if ! /usr/bin/python3 -c 'import selenium' 2>/dev/null; then
    sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q python3-selenium ||
      { $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q python3-selenium; }
  fi
  python=/usr/bin/python3
fi

"$python" tests/preview/browser_test.py "$binary"
