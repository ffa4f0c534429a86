#!/bin/bash
# PID 1 of a simulated host (its own net, pid, mount, uts namespaces): hostname, a private /etc/hosts
# and an empty resolv.conf, the cluster's munge socket folder (bind mounts in this host's mount namespace only), then idle reaping
# orphans. TERM -> it exits -> the kernel SIGKILLs every process of the host's pid namespace.
set -e
hostname "$1"
mount --bind "$MH/etc/hosts" /etc/hosts
mount --bind "$MH/etc/resolv.conf" /etc/resolv.conf
mount --bind "$MH/munge" /run/munge                 # the cluster's munged (cluster-up.sh)
sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $! || true; done
