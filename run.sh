#!/usr/bin/env bash
# ptxlm's one entry point.
#   ./run.sh chat        set up, build, fetch the models, chat with SmolLM2-135M-Instruct
#   ./run.sh test        set up, build, then run every test
#   ./run.sh serve       set up, build, fetch the models, serve SmolLM2-135M-Instruct over HTTP (OpenAI API)
#   ./run.sh ARGS...     set up, build, then run `ptxlm ARGS...`
# Set-up installs what is missing (Debian packages, the Python venv, the real
# models) and is a no-op when everything is present.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
BUILD=${PTXLM_BUILD_DIR:-$ROOT/build}
JOBS=${PTXLM_JOBS:-$(nproc)}

if [ -t 2 ]; then
  step() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
else
  step() { printf '==> %s\n' "$*" >&2; }
fi
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

APT_PACKAGES=(cmake ninja-build g++ pkg-config python3 python3-venv
  libcpp-httplib-dev nlohmann-json3-dev libgtest-dev libsentencepiece-dev
  libpcre2-dev libedit-dev libcli11-dev chromium)

setup_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  step "installing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "need root or sudo to install: ${missing[*]}"
    sudo=sudo
  fi
  $sudo apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get install failed for: ${missing[*]}"
}

setup_venv() {
  local stamp=.venv/.requirements
  if [ -x .venv/bin/python ] && cmp -s requirements.txt "$stamp"; then return 0; fi
  step "creating the Python venv (.venv) with $(grep -v '^#' requirements.txt | tr '\n' ' ')"
  [ -x .venv/bin/python ] || python3 -m venv .venv || die "python3 -m venv failed"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt \
    || die "pip install -r requirements.txt failed"
  cp requirements.txt "$stamp"
}

# The CUDA toolkit gives the Driver API headers and ptxas (tests assemble every
# kernel); nothing links libcuda. It is not a Debian package of a usable
# version, so it must be present (this machine kind ships it at /usr/local/cuda).
check_cuda_toolkit() {
  local cuda=${CUDA_HOME:-/usr/local/cuda}
  [ -f "$cuda/include/cuda.h" ] && [ -x "$cuda/bin/ptxas" ] && return 0
  die "the CUDA toolkit is missing: need $cuda/include/cuda.h and $cuda/bin/ptxas (install the CUDA toolkit, or set CUDA_HOME)"
}

build() {
  check_cuda_toolkit
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    step "configuring ($BUILD)"
    cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null || die "cmake configure failed"
  fi
  step "building with $JOBS jobs"
  cmake --build "$BUILD" -j "$JOBS" || die "build failed"
}

# "$@": models/fetch's options (--test-data: also the tokenizer test data).
fetch_models() {
  step "fetching the real models${1:+ and the test data}"
  .venv/bin/python models/fetch "$@" || die "models/fetch failed"
}

setup() { setup_apt; setup_venv; build; fetch_models "$@"; }

run_tests() {
  local t0=$SECONDS
  step "running the test suite (ctest)"
  ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" || die "tests failed"
  if [ "${PTXLM_SKIP_SANITIZE:-0}" = 1 ]; then
    step "sanitizer run skipped: PTXLM_SKIP_SANITIZE=1"
  else
    local san=${BUILD}-san
    step "sanitizer build (ASan + UBSan) of the parser, quant and tokenizer tests"
    if [ ! -f "$san/CMakeCache.txt" ]; then
      cmake -S . -B "$san" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTXLM_SANITIZE=ON >/dev/null \
        || die "sanitizer configure failed"
    fi
    cmake --build "$san" -j "$JOBS" --target sanitize_tests || die "sanitizer build failed"
    ASAN_OPTIONS=detect_leaks=1 ctest --test-dir "$san" --output-on-failure -j "$JOBS" -L sanitize \
      || die "sanitizer tests failed"
  fi
  step "all tests passed in $((SECONDS - t0)) s"
}

cmd=${1:-}
case "$cmd" in
  ""|-h|--help)
    sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  test)
    setup --test-data
    run_tests ;;
  chat)
    setup
    shift
    exec "$BUILD/tools/ptxlm/ptxlm" chat "$@" ;;
  *)
    setup
    exec "$BUILD/tools/ptxlm/ptxlm" "$@" ;;
esac
