#!/usr/bin/env bash
# Start a throw-away one-node SLURM cluster for the `cli.py sweep --launcher slurm` tests: munged, slurmctld and
# slurmd on this machine, the node named `localhost` (127.0.0.1, ports 6817/6818 bound to it only) with this
# machine's CPUs and memory, state and logs in /tmp/pe-slurm, finished jobs listed by `sacct -c` (a job
# completion file; no accounting database). Installs Debian's slurm-wlm and munge first when they are missing.
# Idempotent: does nothing when the node already answers (idle or running jobs). Refuses to replace a slurm.conf it did not write.
# Waits until `sinfo` shows the node idle, then prints its partition name: debug
set -euo pipefail
DIR=${PE_SLURM_DIR:-/tmp/pe-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by pe-sweeps scripts/start_slurm.sh"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
node_idle() { sinfo -h -n localhost -o %T 2>/dev/null | grep -qx idle; }
# already running (a second .ci/run on one machine: jobs of the first may still hold the node)
node_up() { sinfo -h -n localhost -o %T 2>/dev/null | grep -qxE 'idle|mixed|allocated|completing'; }
if node_up; then echo debug; exit 0; fi
if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  echo "error: $CONF exists and was not written by this script; not replacing a real cluster's configuration" >&2
  exit 1
fi
mkdir -p "$DIR/state" "$DIR/slurmd" /etc/slurm
CPUS=$(nproc)
MEMORY=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
cat >"$CONF" <<EOF
$MARK
ClusterName=pe
SlurmctldHost=localhost(127.0.0.1)
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/slurmd
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
ReturnToService=2
KillWait=5
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=$(hostname) CPUs=$CPUS RealMemory=$MEMORY State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
if ! pgrep -u munge -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
  [ -s /etc/munge/munge.key ] || runuser -u munge -- /usr/sbin/mungekey --create >/dev/null
  runuser -u munge -- /usr/sbin/munged
fi
[ -s "$DIR/slurmctld.pid" ] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null || slurmctld
[ -s "$DIR/slurmd.pid" ] && kill -0 "$(cat "$DIR/slurmd.pid")" 2>/dev/null || slurmd -N localhost
for _ in $(seq 120); do
  node_idle && { echo debug; exit 0; }
  scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true  # a node left down by an earlier run
  sleep 0.5
done
echo "error: the SLURM node did not become idle; see $DIR/slurmctld.log and $DIR/slurmd.log" >&2
sinfo >&2 || true
exit 1
