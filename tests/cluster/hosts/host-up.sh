#!/bin/bash
# host-up.sh hN: start host hN (its namespaces on top of netns P-hN); writes run/hN.init (the root-ns
# pid of the host's PID 1) and run/hN.unshare. nsenter --net, not `ip netns exec` (that remounts /sys
# and slurmd 22.05 refuses to start without /sys/fs/cgroup).
set -euo pipefail
. "$(dirname "$0")/common.sh"
h=$1
MH=$MH setsid nsenter --net=/run/netns/$P-$h unshare --pid --fork --mount-proc --uts --kill-child \
  "$(dirname "$0")/hostinit.sh" $h </dev/null >$MH/log/$h.init.log 2>&1 &
upid=$!
c=
for i in $(seq 200); do
  # unshare's child that is PID 1 of the new namespace and runs hostinit.sh (a short-lived helper
  # child comes first, seen here: taking it for the init lost the host)
  for c in $(cat /proc/$upid/task/*/children 2>/dev/null); do
    [ "$(cat /proc/$c/comm 2>/dev/null)" = hostinit.sh ] && grep -qP '^NSpid:.*\t1$' /proc/$c/status 2>/dev/null && break 2
  done
  c=; sleep 0.05
done
echo $upid > $MH/run/$h.unshare
[ -n "$c" ] || { echo "host $h did not start" >&2; exit 1; }
echo $c > $MH/run/$h.init
