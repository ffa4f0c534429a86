#!/bin/bash
# cluster-up.sh: start the two-host cluster (see common.sh); exits 0 once sinfo shows h1 and h2 idle
# and sacctmgr answers. Prints one "phase seconds" line per phase on stderr (the fixture reports them).
# Env: KILL_WAIT (20: SIGKILL that long after the SIGTERM of a requeue or cancel; 5 was too short for
# every rank's notice save on a loaded 2-core machine), CRED_EXPIRE (5, SLURM's minimum: a requeued job starts again ~6 s later), SLURMD_TIMEOUT (10),
# ACCOUNTING (1: MariaDB + slurmdbd on h0 so that sacct answers; 0: none), EXTRA_CONF (slurm.conf lines).
set -euo pipefail
. "$(dirname "$0")/common.sh"
B=$(cd "$(dirname "$0")" && pwd)
ACCOUNTING=${ACCOUNTING:-1}
t0=$(date +%s%N)
phase() { echo "phase $1 $(( ($(date +%s%N) - t0) / 1000000 )) ms" >&2; }
mkdir -p $MH/etc $MH/run $MH/log $MH/state/ctld $MH/state/h1 $MH/state/h2 $MH/db
cat > $MH/etc/hosts <<H
127.0.0.1 localhost
$(addr h0) h0
$(addr h1) h1
$(addr h2) h2
H
echo '# no DNS inside the simulated hosts' > $MH/etc/resolv.conf
if [ "$ACCOUNTING" = 1 ]; then
  ACCT="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$(addr h0)
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux"
else
  ACCT="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
cat > $SLURM_CONF <<C
ClusterName=$P
SlurmctldHost=h0($(addr h0))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=${CRED_EXPIRE:-5}
StateSaveLocation=$MH/state/ctld
SlurmdSpoolDir=$MH/state/%n
SlurmctldPidFile=$MH/run/slurmctld.pid
SlurmdPidFile=$MH/run/slurmd.%n.pid
SlurmctldLogFile=$MH/log/slurmctld.log
SlurmdLogFile=$MH/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
$ACCT
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
SlurmdTimeout=${SLURMD_TIMEOUT:-10}
SlurmctldTimeout=10
MessageTimeout=5
TCPTimeout=2
KillWait=${KILL_WAIT:-20}
InactiveLimit=0
MinJobAge=300
JobRequeue=1
SchedulerParameters=sched_interval=1,bf_interval=1
NodeName=h1 NodeAddr=$(addr h1) NodeHostname=h1 CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName=h2 NodeAddr=$(addr h2) NodeHostname=h2 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=main Nodes=h1,h2 Default=YES MaxTime=INFINITE State=UP
${EXTRA_CONF:-}
C
cat > $MH/etc/slurmdbd.conf <<D
AuthType=auth/munge
DbdHost=h0
DbdAddr=$(addr h0)
DbdPort=6819
SlurmUser=root
PidFile=$MH/run/slurmdbd.pid
LogFile=$MH/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=root
StorageLoc=slurm_acct_db
D
chmod 600 $MH/etc/slurmdbd.conf
# --- network: a bridge of our own, one veth per host, nothing routed out ----
ip link add ${P}br0 type bridge
sysctl -qw net.ipv6.conf.${P}br0.disable_ipv6=1 || true
ip addr add $NET.254/24 dev ${P}br0
ip link set ${P}br0 up
for h in $HOSTS; do
  ip netns add $P-$h
  ip link add $P-$h type veth peer name eth0 netns $P-$h
  ip link set $P-$h master ${P}br0 up
  ip -n $P-$h addr add $(addr $h)/24 dev eth0
  ip -n $P-$h link set eth0 up
  ip -n $P-$h link set lo up
done
phase network
# --- munge of our own, in the root namespace, with a key of our own. Clients of slurmdbd (sacctmgr,
# sacct, slurmctld) always use munge's default socket /run/munge/munge.socket.2 (measured: they ignore
# AuthInfo=socket=), so every host, and login.sh for the root namespace, bind-mounts $MH/munge over
# /run/munge in a mount namespace of its own: the machine's munged (if any) is never used or touched.
mkdir -p $MH/munge /run/munge
chmod 755 $MH/munge
[ -f $MH/munge/munge.key ] || { dd if=/dev/urandom of=$MH/munge/munge.key bs=1024 count=1 2>/dev/null; chmod 400 $MH/munge/munge.key; }
/usr/sbin/munged --key-file=$MH/munge/munge.key --socket=$MH/munge/munge.socket.2 \
  --pid-file=$MH/munge/munged.pid --seed-file=$MH/munge/munged.seed --log-file=$MH/log/munged.log
for h in $HOSTS; do "$B/host-up.sh" $h; done
phase hosts
if [ "$ACCOUNTING" = 1 ]; then
  # MariaDB on h0 (its own network: 127.0.0.1:3306 there is no port of the machine's)
  if [ ! -d $MH/db/data/mysql ]; then
    mariadb-install-db --datadir=$MH/db/data --user=root --auth-root-authentication-method=normal \
      --skip-test-db >$MH/log/mariadb-install.log 2>&1
    phase mariadb-install-db
  fi
  rm -f $MH/db/mysqld.sock
  "$B/on.sh" h0 setsid mariadbd --no-defaults --datadir=$MH/db/data --user=root --bind-address=127.0.0.1 \
    --port=3306 --socket=$MH/db/mysqld.sock --pid-file=$MH/run/mariadb.pid --log-error=$MH/log/mariadb.log \
    --skip-name-resolve --innodb-buffer-pool-size=16M --innodb-log-file-size=8M --performance-schema=OFF \
    </dev/null >/dev/null 2>&1 &
  for i in $(seq 600); do [ -S $MH/db/mysqld.sock ] && break; sleep 0.05; done
  [ -S $MH/db/mysqld.sock ] || { echo "MariaDB did not start" >&2; tail -20 $MH/log/mariadb.log >&2; exit 1; }
  phase mariadb
  "$B/on.sh" h0 slurmdbd   # reads slurmdbd.conf beside $SLURM_CONF
  ok=; end=$(( $(date +%s) + 30 ))
  while [ $(date +%s) -lt $end ]; do
    "$B/login.sh" sacctmgr -i add cluster $P >/dev/null 2>&1 || true
    "$B/login.sh" sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx $P && { ok=1; break; }
    sleep 0.2
  done
  [ -n "$ok" ] || { echo "slurmdbd did not answer" >&2; tail -20 $MH/log/slurmdbd.log >&2; exit 1; }
  phase slurmdbd
fi
"$B/on.sh" h0 slurmctld -f $SLURM_CONF
"$B/on.sh" h1 slurmd -f $SLURM_CONF -N h1
"$B/on.sh" h2 slurmd -f $SLURM_CONF -N h2
for i in $(seq 600); do
  if [ "$("$B/login.sh" sinfo -h -N -o '%N=%t' 2>/dev/null | tr '\n' ' ')" = "h1=idle h2=idle " ]; then phase slurm; exit 0; fi
  sleep 0.1
done
echo "the cluster did not become idle" >&2; tail -20 $MH/log/slurmctld.log >&2; exit 1
