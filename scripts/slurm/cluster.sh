#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests/test_slurm.py (make test-slurm):
# Debian's munge and slurm-wlm, a generated munge key and slurm.conf, all state in DIR.
#   scripts/slurm/cluster.sh start DIR   start munged, slurmctld, slurmd; wait until the node
#                                        is idle; print SLURM_CONF=DIR/slurm.conf
#   scripts/slurm/cluster.sh stop DIR    stop the daemons started in DIR (by their pid files)
# Root only (slurmd runs jobs as their user). proctrack/linuxproc and task/none: no cgroups.
set -euo pipefail
what=${1:?usage: cluster.sh start|stop DIR}
dir=$(realpath -m "${2:?usage: cluster.sh start|stop DIR}")
node=hakbench-node

stop() {
    local pidfile pid n
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munged.pid"; do
        [ -s "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill -TERM "$pid" 2>/dev/null || { rm -f "$pidfile"; continue; }
        for n in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    done
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    [ "$(id -u)" -eq 0 ] || { echo "cluster.sh: run as root" >&2; exit 2; }
    local tool
    for tool in munged slurmctld slurmd sinfo; do
        command -v "$tool" >/dev/null || { echo "cluster.sh: no $tool (make setup installs munge and slurm-wlm)" >&2; exit 2; }
    done
    mkdir -p "$dir"/{munge,state,spool}
    chmod 700 "$dir" "$dir/munge"
    trap 'stop' ERR
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
        --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
    local cpus
    cpus=$(nproc)
    cat >"$dir/slurm.conf" <<EOF
ClusterName=hakbench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$node NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=lab Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -c -f "$SLURM_CONF"
    slurmd -f "$SLURM_CONF" -N "$node"
    local n state=""
    for n in $(seq 120); do
        state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
        [ "$state" = idle ] && break
        sleep 0.5
    done
    if [ "$state" != idle ]; then
        echo "cluster.sh: node $node not idle after 60 s (state '$state'); logs in $dir" >&2
        tail -5 "$dir"/*.log >&2 || true
        stop
        exit 1
    fi
    trap - ERR
    echo "SLURM_CONF=$SLURM_CONF"
}

case "$what" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: cluster.sh start|stop DIR" >&2; exit 2 ;;
esac
