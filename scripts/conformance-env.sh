#!/usr/bin/env bash
# Creates the conformance tier's Python environment, .venv-conformance/ (git-ignored), with the
# pinned packages of test/conformance/requirements.txt, and checks that the perf_analyzer binary
# it brings can start. Does nothing when the environment already matches the requirements file.
# Used by `npm run test:conformance` and .ci/run. Needs /usr/bin/python3 with venv/ensurepip
# (Debian: python3-venv) and, for perf_analyzer, libb64.so.0d (Debian: libb64-0d); .ci/run
# installs both when missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-conformance"
requirements="$root/test/conformance/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  if ! /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo "conformance-env: /usr/bin/python3 cannot create virtual environments; install python3-venv (apt-get install -y python3-venv)" >&2
    exit 1
  fi
  echo "conformance-env: creating $venv from test/conformance/requirements.txt"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$requirements"
  echo "$want" > "$stamp"
fi

# perf_analyzer needs libcudart.so.12 from the CUDA runtime wheel on the loader path; the tests set
# the same LD_LIBRARY_PATH (test/conformance/helpers/tier.ts). A binary that cannot start is
# reported with the loader's evidence but does not stop the tier: the client cases still run, and
# the perf_analyzer and Model Analyzer cases fail with the same error.
cudart="$(echo "$venv"/lib/python3*/site-packages/nvidia/cuda_runtime/lib)"
if ! out="$(LD_LIBRARY_PATH="$cudart" "$venv/bin/perf_analyzer" --help 2>&1)" && ! grep -q 'Usage:' <<<"$out"; then
  echo "conformance-env: $venv/bin/perf_analyzer cannot start:" >&2
  echo "$out" | head -5 >&2
  echo "ldd:" >&2
  LD_LIBRARY_PATH="$cudart" ldd "$venv/bin/perf_analyzer" | grep 'not found' >&2 || true
  echo "conformance-env: see docs/compatibility.md (Tool versions) for the versions known to run here" >&2
fi
echo "conformance-env: $venv ready ($(grep -E '^[a-z]' "$requirements" | paste -sd' '))"
