#!/bin/bash
# login.sh CMD...: run CMD in the root namespace (the login node) as a client of this cluster: SLURM_CONF
# set, and the cluster's munge socket folder bind-mounted over /run/munge in a mount namespace of CMD's own.
. "$(dirname "$0")/common.sh"
exec unshare --mount --propagation private -- /bin/sh -c 'mount --bind "$0" /run/munge && exec "$@"' "$MH/munge" "$@"
