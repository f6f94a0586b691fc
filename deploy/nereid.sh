#!/bin/sh
# The `nereid` command of the container image (/usr/local/bin/nereid): Nereid's command line from
# the tree in $NEREID_HOME (/opt/nereid in the image). `exec` makes node the process that gets
# the container's signals, so SIGTERM starts the server's graceful shutdown. The Node.js options
# are those `nereid serve` is meant to run with (SERVE_NODE_OPTIONS, docs/operations.md), unless
# NEREID_NODE_FLAGS replaces them (node's command line wins over NODE_OPTIONS, which still adds
# its own).
set -eu
# shellcheck disable=SC2086 # the flags are words
exec node ${NEREID_NODE_FLAGS:---max-semi-space-size=64 --single-threaded-gc} "${NEREID_HOME:-/opt/nereid}/packages/server/bin/nereid.js" "$@"
