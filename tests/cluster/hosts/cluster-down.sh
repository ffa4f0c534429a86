#!/bin/bash
# cluster-down.sh: every host (and so every process in it: slurmctld, slurmdbd, MariaDB, slurmd,
# steps, tasks), our munged, the veths, namespaces and bridge of prefix P. Safe to run on a half-started
# or already stopped cluster. Touches no other link and no address of the machine's own network.
. "$(dirname "$0")/common.sh"
for h in $HOSTS; do p=$(cat $MH/run/$h.init 2>/dev/null) && kill -TERM $p 2>/dev/null; done
for h in $HOSTS; do
  u=$(cat $MH/run/$h.unshare 2>/dev/null) || continue
  for i in $(seq 100); do alive $u || break; sleep 0.02; done
  kill -KILL $u 2>/dev/null
done
p=$(cat $MH/munge/munged.pid 2>/dev/null) && kill -TERM $p 2>/dev/null && \
  for i in $(seq 200); do alive $p || break; sleep 0.02; done
for h in $HOSTS; do
  ip link del $P-$h 2>/dev/null           # synchronous (netns del alone frees the veth later)
  ip netns del $P-$h 2>/dev/null
done
ip link del ${P}br0 2>/dev/null
rm -rf $MH/run $MH/munge/munge.socket.2* $MH/munge/munged.pid
exit 0
