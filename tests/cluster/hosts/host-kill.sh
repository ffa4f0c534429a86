#!/bin/bash
# host-kill.sh hN: power host hN off: its PID 1 exits and the kernel SIGKILLs every process of it
# (slurmd, slurmstepd, the job's tasks). Its link stays up, like a dead box on a live switch.
. "$(dirname "$0")/common.sh"
h=$1
p=$(cat $MH/run/$h.init 2>/dev/null) && kill -TERM $p 2>/dev/null
u=$(cat $MH/run/$h.unshare 2>/dev/null) && for i in $(seq 200); do alive $u || break; sleep 0.02; done
[ -n "${u:-}" ] && kill -KILL $u 2>/dev/null
rm -f $MH/run/$h.init $MH/run/$h.unshare
exit 0
