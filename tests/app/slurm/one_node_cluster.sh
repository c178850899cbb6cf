#!/usr/bin/env bash
# A one-node Slurm cluster in a directory of its own, for tests: munged, slurmctld and slurmd on this
# machine (as root), own ports, state and spool, nothing under /etc touched.
#   one_node_cluster.sh start DIR   writes DIR/slurm.conf, starts the daemons, waits for the node to be idle
#   one_node_cluster.sh stop DIR    stops them by their pid files
# Clients use it with SLURM_CONF=DIR/slurm.conf. Exit 77 when Slurm or munge is missing or cannot start
# here (the caller skips), 1 on other errors.
set -uo pipefail
cmd=${1:?start or stop}
dir=${2:?directory}

stop() {
  # Jobs first (a slurmstepd outlives its slurmd), then the daemons.
  if [ -f "$dir/slurmctld.pid" ]; then
    SLURM_CONF="$dir/slurm.conf" scancel --quiet --full --user="$(id -un)" 2>/dev/null
    for _ in $(seq 50); do
      [ -z "$(SLURM_CONF="$dir/slurm.conf" squeue -h -t R,CG 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for d in slurmd slurmctld munged; do
    [ -f "$dir/$d.pid" ] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
  done
  for _ in $(seq 50); do
    alive=0
    for d in slurmd slurmctld munged; do
      [ -f "$dir/$d.pid" ] && kill -0 "$(cat "$dir/$d.pid")" 2>/dev/null && alive=1
    done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  rm -f "$dir"/*.pid
}

if [ "$cmd" = stop ]; then stop; exit 0; fi

for exe in munged mungekey slurmctld slurmd sinfo sbatch; do
  command -v "$exe" >/dev/null || [ -x "/usr/sbin/$exe" ] || { echo "one_node_cluster: $exe not installed" >&2; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "one_node_cluster: needs root (SlurmUser=root)" >&2; exit 77; }
export PATH="$PATH:/usr/sbin"

mkdir -p "$dir"/{state,spool,munge} && chmod 700 "$dir/munge"
# Free ports for slurmctld and slurmd: random ones nobody answers on.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
host=$(hostname -s)
cat > "$dir/slurm.conf" <<CONF
ClusterName=mwbtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF="$dir/slurm.conf"

mungekey -c -k "$dir/munge/munge.key" -f 2>/dev/null || { echo "one_node_cluster: mungekey failed" >&2; exit 77; }
chmod 400 "$dir/munge/munge.key"
munged --force -S "$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" 2>>"$dir/munged.log" \
  || { echo "one_node_cluster: munged did not start (see $dir/munged.log)" >&2; stop; exit 77; }
slurmctld 2>>"$dir/slurmctld.log" || { echo "one_node_cluster: slurmctld did not start" >&2; stop; exit 77; }
slurmd 2>>"$dir/slurmd.log" || { echo "one_node_cluster: slurmd did not start" >&2; stop; exit 77; }
for _ in $(seq 150); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null)
  [ "$state" = idle ] && { echo "one_node_cluster: $host idle ($SLURM_CONF)"; exit 0; }
  sleep 0.1
done
echo "one_node_cluster: the node did not become idle (state '$state'); logs in $dir" >&2
tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
stop
exit 77
