#!/bin/bash
# host-boot.sh hN: boot compute host hN again and start its slurmd (spool kept, like a reboot).
set -euo pipefail
. "$(dirname "$0")/common.sh"
h=$1
"$(dirname "$0")/host-up.sh" $h
"$(dirname "$0")/on.sh" $h slurmd -f $SLURM_CONF -N $h
