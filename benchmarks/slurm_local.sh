#!/bin/sh
# A single-node Slurm cluster on this machine, for `make test-slurm` (tests/slurm/): Debian's
# slurm-wlm (slurmctld + slurmd), munge, and slurmdbd on MariaDB so that `sacct` (which submitit
# polls) works. One node with the machine's CPUs, one partition "debug". The daemons are started
# by hand (no systemd needed), as root. Rerunning it restarts what is down. Each daemon it starts
# is recorded (name, PID and its PID file) in $STARTED; `stop` stops only those, never a munge or
# MariaDB the machine already ran: each by its recorded PID or, when it was restarted since (the
# dead-controller test restarts slurmctld), by the PID in its own PID file, and waits (up to
# SLURM_LOCAL_STOP_WAIT seconds, default 60) for each to exit. SLURM_CPUS may declare more CPUs
# than the machine has (the soak test runs 20 one-CPU tasks at once on fewer cores): slurmd then
# takes the configured count.
#   sudo sh benchmarks/slurm_local.sh          # install (apt) if needed, configure, start
#   sudo sh benchmarks/slurm_local.sh stop     # stop the daemons this script started
set -eu
HOST=$(hostname -s)
CPUS=${SLURM_CPUS:-$(nproc)}
MEM=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
STARTED=${SLURM_LOCAL_STATE:-/run/invperm-slurm-local.pids}

# record NAME PIDFILE: wait for the daemon's PID file, then note "NAME PID PIDFILE" in $STARTED
record() {
    for _ in $(seq 50); do [ -s "$2" ] && break; sleep 0.2; done
    [ -s "$2" ] && echo "$1 $(cat "$2") $2" >>"$STARTED"
}

# named NAME PID: PID is held by a process named NAME (not by another program that reused it)
named() { [ "$(cat "/proc/$2/comm" 2>/dev/null)" = "$1" ]; }
# running NAME PID: that process has not exited (is not a zombie waiting for its parent)
running() { named "$1" "$2" && ! grep -q '^State:[[:space:]]*Z' "/proc/$2/status" 2>/dev/null; }
# within SECONDS COMMAND...: wait while COMMAND succeeds, SECONDS at most
within() { n=$(($1 * 5)); shift; while "$@" && [ "$n" -gt 0 ]; do sleep 0.2; n=$((n - 1)); done; }

if [ "${1:-}" = stop ]; then
    [ -f "$STARTED" ] || { echo "nothing recorded in $STARTED: no daemon of this script to stop"; exit 0; }
    WAIT=${SLURM_LOCAL_STOP_WAIT:-60}
    case $WAIT in ''|*[!0-9]*) echo "SLURM_LOCAL_STOP_WAIT must be whole seconds, got '$WAIT'" >&2; exit 2;; esac
    # the last started first, each awaited before the next; the record is kept while one is left
    tac "$STARTED" | {
        left=0
        while read -r name pid pidfile; do
            for p in $pid $( [ -n "$pidfile" ] && cat "$pidfile" 2>/dev/null); do
                running "$name" "$p" || continue
                kill "$p" 2>/dev/null
                within "$WAIT" running "$name" "$p"
                if running "$name" "$p"; then
                    echo "$name ($p) still runs ${WAIT} s after SIGTERM: end it with kill -9 $p," \
                         "then rerun \`sh $0 stop\`" >&2
                    left=1
                else
                    within 5 named "$name" "$p"  # until its parent reaps it: pgrep lists a zombie too
                    echo "stopped $name ($p)"
                fi
            done
        done
        exit "$left"
    } || exit 1
    rm -f "$STARTED"
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends slurm-wlm munge slurmdbd mariadb-server
fi

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /run/mysqld
chown munge:munge /run/munge
chown mysql:mysql /run/mysqld

# munge: one key, one daemon
[ -s /etc/munge/munge.key ] || { mungekey --create --force 2>/dev/null || create-munge-key -f; }
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || { rm -f /run/munge/munged.pid; runuser -u munge -- /usr/sbin/munged && record munged /run/munge/munged.pid; }

# MariaDB for slurmdbd
if ! pgrep -x mariadbd >/dev/null; then
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >/dev/null
    rm -f /run/mysqld/invperm.pid
    runuser -u mysql -- /usr/sbin/mariadbd --skip-networking=0 --bind-address=127.0.0.1 \
        --pid-file=/run/mysqld/invperm.pid >/var/log/slurm/mariadb.log 2>&1 &
    for _ in $(seq 60); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 1; done
    record mariadbd /run/mysqld/invperm.pid
fi
mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
            CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

cat >/etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
chmod 600 /etc/slurm/slurmdbd.conf

cat >/etc/slurm/slurm.conf <<CONF
ClusterName=local
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SchedulerType=sched/backfill
MpiDefault=none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
KillWait=30
MinJobAge=300
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF

pgrep -x slurmdbd >/dev/null || { rm -f /run/slurmdbd.pid; slurmdbd && record slurmdbd /run/slurmdbd.pid; }
for _ in $(seq 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
sacctmgr -i add cluster local >/dev/null 2>&1 || true
pgrep -x slurmctld >/dev/null || { rm -f /run/slurmctld.pid; slurmctld && record slurmctld /run/slurmctld.pid; }
pgrep -x slurmd >/dev/null || { rm -f /run/slurmd.pid; slurmd && record slurmd /run/slurmd.pid; }
for _ in $(seq 30); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 1; done
scontrol update nodename="$HOST" state=resume 2>/dev/null || true
sinfo
