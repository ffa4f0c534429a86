# Sourced by every script here. A two-host SLURM cluster simulated on one machine (run as root):
#   h0 = controller (slurmctld, slurmdbd, MariaDB), h1/h2 = compute hosts (one slurmd each); each host
#   is a network + PID + UTS + mount namespace sharing the filesystem (recipe: ../shared/multihost/).
# MH   folder of everything generated (conf, logs, state, pid files, munge key and socket, database)
# P    prefix of the namespaces and links this cluster owns on the machine (netns P-h0.., bridge Pbr0)
# NET  the private /24's first three octets (the root namespace's end of the bridge is NET.254)
MH=${MH:?MH must name the cluster folder}
P=${P:-rbmh}
NET=${NET:-10.214.7}
HOSTS="h0 h1 h2"
addr() { case $1 in h0) echo $NET.1;; h1) echo $NET.11;; h2) echo $NET.12;; esac; }
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $s != Z* ]]; }   # a zombie counts as dead
export SLURM_CONF=$MH/etc/slurm.conf
