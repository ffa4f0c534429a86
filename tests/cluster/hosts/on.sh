#!/bin/bash
# on.sh hN CMD...: run CMD on host hN (its net, pid, mount and uts namespaces), in this directory.
. "$(dirname "$0")/common.sh"
h=$1; shift
exec nsenter -t "$(cat $MH/run/$h.init)" -n -p -m -u --wdns="$PWD" -- "$@"
