#!/bin/sh
# The `nereid` command of the container image (/usr/local/bin/nereid): Nereid's command line from
# the tree in $NEREID_HOME (/opt/nereid in the image). `exec` makes node the process that gets
# the container's signals, so SIGTERM starts the server's graceful shutdown.
set -eu
exec node "${NEREID_HOME:-/opt/nereid}/packages/server/bin/nereid.js" "$@"
