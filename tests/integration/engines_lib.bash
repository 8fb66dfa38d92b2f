# engines_lib.bash - real engines for the launcher's tests, started by the
# test itself and stopped by its exit trap: a private sshd (generated keys,
# a high port, nothing of the system's ssh configuration used), hosts made
# of network namespaces on a private bridge, each with its own sshd, and a
# private Slurm cluster (munged, slurmctld and slurmd with their own key,
# sockets, ports, state and configuration). Sourced after launch_lib.bash.
#
# A test that cannot have an engine says why and exits 0 ("skipped: ...").

ENGINE_CLEANUP=()

# The time a stop may take. The aim is 2 s, and the TABLE lines show what
# each stop took: quiet, 0.2-0.9 s under mpirun and Slurm and 0.8-2.7 s
# over ssh; at a load of 12 on 2 cores, 1.7-3.0 s over ssh; and once, with
# three test suites running at once (load 34 on 2 cores), a failing
# worker's job over ssh took 11.7 s to be gone. So the bound is 20 s (25 s
# in a sanitizer build, where every process starts and exits several
# times slower). What it must catch is a stop that never comes, or one
# that leaves a process to run on: the jobs here would otherwise run for
# hundreds of seconds (a worker that never joins, 100,000 epochs), and
# a wait for Slurm's own SIGKILL (its KillWait, 30 s) is still over it.
STOP_MS=20000
SANITIZED=
case $DTRAIN_BUILD in *-asan | *-tsan) STOP_MS=25000 SANITIZED=1 ;; esac

# stop_daemon PIDFILE: SIGTERM, then wait (10 s at most, then SIGKILL)
# until it is gone - slurmctld saves its state as it stops, and a
# directory removed under it would be made again.
stop_daemon() {
	local pid i
	pid=$(cat "$1" 2>/dev/null) || return 0
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null || return 0
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 0
		# (a zombie of ours counts as gone)
		grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null
}

engines_cleanup() {
	local i
	for ((i = ${#ENGINE_CLEANUP[@]} - 1; i >= 0; i--)); do
		eval "${ENGINE_CLEANUP[$i]}" >/dev/null 2>&1
	done
	cleanup
}
trap engines_cleanup EXIT

skip() {
	echo "skipped: $*"
	exit 0
}

need_root() {
	[ "$(id -u)" = 0 ] || skip "not root: $1 needs root (run the suite as root, as CI does)"
}

need_cmds() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || [ -x "$c" ] ||
			skip "$c is not installed (make test installs it as root)"
	done
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

# wait_for SECONDS COMMAND...: poll until the command succeeds.
wait_for() {
	local end=$(($(now_ms) + $1 * 1000))
	shift
	until "$@" >/dev/null 2>&1; do
		[ "$(now_ms)" -lt "$end" ] || return 1
		sleep 0.1
	done
}

# ------------------------------------------------------------------
# ssh: keys, a client wrapper (DTRAIN_SSH), sshd instances.

SSHDIR=$TMP/ssh

ssh_setup() {
	need_cmds /usr/sbin/sshd ssh ssh-keygen
	mkdir -p "$SSHDIR" /run/sshd
	chmod 700 "$SSHDIR"
	ssh-keygen -q -t ed25519 -N '' -f "$SSHDIR/host_key" >/dev/null
	ssh-keygen -q -t ed25519 -N '' -f "$SSHDIR/id" >/dev/null
	cp "$SSHDIR/id.pub" "$SSHDIR/authorized_keys"
	cat >"$SSHDIR/config" <<EOF
IdentityFile $SSHDIR/id
IdentitiesOnly yes
UserKnownHostsFile /dev/null
StrictHostKeyChecking no
LogLevel ERROR
EOF
	# The client every test uses: ssh with the private configuration
	# (dtrain launch through DTRAIN_SSH, mpirun through plm_rsh_agent).
	cat >"$SSHDIR/ssh" <<EOF
#!/bin/sh
exec ssh -F "$SSHDIR/config" "\$@"
EOF
	chmod +x "$SSHDIR/ssh"
	export DTRAIN_SSH=$SSHDIR/ssh
}

# sshd_start NAME ADDR PORT [NETNS]: an sshd listening on ADDR:PORT. With
# PRIVATE_DIR set, that directory is the host's own (a tmpfs in a mount
# namespace of its sshd), as a directory on another machine would be.
sshd_start() {
	local name=$1 addr=$2 port=$3 ns=${4:-} pre=()
	cat >"$SSHDIR/sshd_$name.conf" <<EOF
Port $port
ListenAddress $addr
HostKey $SSHDIR/host_key
AuthorizedKeysFile $SSHDIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $SSHDIR/sshd_$name.pid
LogLevel ERROR
EOF
	[ -n "$ns" ] && pre=(ip netns exec "$ns")
	if [ -n "${PRIVATE_DIR:-}" ]; then
		mkdir -p "$PRIVATE_DIR"
		"${pre[@]}" unshare -m --propagation private sh -c \
			'mount -t tmpfs dtrain "$1" && exec /usr/sbin/sshd -f "$2" -E "$3"' \
			sh "$PRIVATE_DIR" "$SSHDIR/sshd_$name.conf" "$SSHDIR/sshd_$name.log" || return 1
	else
		"${pre[@]}" /usr/sbin/sshd -f "$SSHDIR/sshd_$name.conf" -E "$SSHDIR/sshd_$name.log" || return 1
	fi
	ENGINE_CLEANUP+=("kill \$(cat '$SSHDIR/sshd_$name.pid')")
	wait_for 10 "$SSHDIR/ssh" -p "$port" "$addr" true ||
		{ echo "sshd $name on $addr:$port does not answer" >&2; cat "$SSHDIR/sshd_$name.log" >&2; return 1; }
}

# ------------------------------------------------------------------
# Hosts: network namespaces on a bridge, 10.R.0.1 here, 10.R.0.(i+1) the
# i-th host (HOSTS[i-1]), each with an sshd on SSH_PORT.

HOSTS=()
NETS_BR=

# hosts_sweep: the namespaces and bridges of an earlier test whose shell
# is gone (killed by CTest's time limit: its clean-up never ran) are
# removed, their processes killed, before new ones are made. A running
# test's are left alone: its pid is alive.
hosts_sweep() {
	local ns br pid
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^dth[0-9]+_[0-9]+$'); do
		pid=${ns#dth}
		pid=${pid%%_*}
		kill -0 "$pid" 2>/dev/null && continue
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$ns" 2>/dev/null &&
			echo "removed namespace $ns: the test (pid $pid) that made it is gone" >&2
	done
	for br in $(ip -o link show type bridge 2>/dev/null | grep -oE 'dtbr[0-9]+' | sort -u); do
		kill -0 "${br#dtbr}" 2>/dev/null && continue
		ip link del "$br" 2>/dev/null &&
			echo "removed bridge $br: the test (pid ${br#dtbr}) that made it is gone" >&2
	done
}

hosts_setup() {
	local n=$1 i ns r=$((100 + RANDOM % 100)) id=$$
	need_root "network namespaces"
	need_cmds ip
	hosts_sweep
	NETS_BR=dtbr$id
	NET=10.$r.$((RANDOM % 250)).
	ip link add "$NETS_BR" type bridge || skip "cannot make a bridge here"
	ENGINE_CLEANUP+=("ip link del $NETS_BR")
	ip addr add "${NET}1/24" dev "$NETS_BR" && ip link set "$NETS_BR" up
	SSH_PORT=$(free_port)
	for ((i = 1; i <= n; i++)); do
		ns=dth${id}_$i
		ip netns add "$ns" || return 1
		ENGINE_CLEANUP+=("ip netns del $ns")
		ip link add "dtv${id}_$i" type veth peer name eth0 netns "$ns" || return 1
		ENGINE_CLEANUP+=("ip link del dtv${id}_$i")
		ip link set "dtv${id}_$i" master "$NETS_BR" up
		ip netns exec "$ns" ip addr add "${NET}$((i + 1))/24" dev eth0
		ip netns exec "$ns" ip link set eth0 up
		ip netns exec "$ns" ip link set lo up
		sshd_start "h$i" "${NET}$((i + 1))" "$SSH_PORT" "$ns" || return 1
		HOSTS+=("${NET}$((i + 1))")
	done
	HERE=${NET}1
}

# ------------------------------------------------------------------
# Slurm: one node (this machine) in a private cluster.

slurm_setup() {
	local host d=$TMP/slurm
	need_root "a private Slurm (slurmd runs jobs as their users)"
	need_cmds munged munge slurmctld slurmd srun salloc sbatch sinfo
	host=$(hostname -s)
	mkdir -p "$d/state" "$d/spool" "$d/log"
	chmod 755 "$TMP" "$d"
	dd if=/dev/urandom of="$d/munge.key" bs=1024 count=1 2>/dev/null
	chmod 400 "$d/munge.key"
	munged -f --socket="$d/munge.sock" --key-file="$d/munge.key" \
		--log-file="$d/log/munged.log" --pid-file="$d/munged.pid" \
		--seed-file="$d/munged.seed" || skip "munged does not start: $(tail -2 "$d/log/munged.log")"
	ENGINE_CLEANUP+=("stop_daemon '$d/munged.pid'")
	cat >"$d/slurm.conf" <<EOF
ClusterName=dt$$
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$d/munge.sock
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
PlugStackConfig=$d/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=dt Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
	: >"$d/plugstack.conf"
	export SLURM_CONF=$d/slurm.conf
	slurmctld -f "$SLURM_CONF" || skip "slurmctld does not start"
	ENGINE_CLEANUP+=("stop_daemon '$d/slurmctld.pid'")
	# What a killed slurmd leaves: its step daemons (found by our
	# SLURM_CONF), after the node daemon is gone.
	ENGINE_CLEANUP+=("for p in \$(pgrep -x slurmstepd); do grep -qz 'SLURM_CONF=$SLURM_CONF' /proc/\$p/environ && kill -9 \$p; done")
	slurmd -f "$SLURM_CONF" || skip "slurmd does not start"
	# Jobs first (their steps), then the node daemon.
	ENGINE_CLEANUP+=("stop_daemon '$d/slurmd.pid'")
	ENGINE_CLEANUP+=("scancel --full --signal=KILL -u root; wait_for 10 test -z \"\$(squeue -h)\"")
	wait_for 30 sh -c 'sinfo -h -o %t | grep -qx idle' ||
		{ tail -5 "$d/log/slurmctld.log" "$d/log/slurmd.log" >&2; skip "the private Slurm node did not come up"; }
}

# ------------------------------------------------------------------
# The jobs the engine tests run, and their results on this host alone.

# job_references: LINREG and REF (linreg's w= b= under the local
# launcher); MNIST and REF_MNIST (make demo's model, one epoch of 2048
# images), MNIST empty in a sanitizer build or without Fashion-MNIST; and
# two worker commands: $TMP/failw (worker rank 1 exits 3 after 1 s,
# writing the time to $TMP/failed_at) and $TMP/stubborn (ignores SIGHUP
# and leaves a child). The rank comes from mpirun, srun or the launcher.
job_references() {
	local B=$DTRAIN_BUILD data=${DTRAIN_DATA:-/usr/share/datasets/fashion-mnist}
	LINREG=("$B/examples/linreg" --kvstore dist_sync --epochs 3)
	"$DTRAIN" launch -n 2 -s 2 -- "${LINREG[@]}" >"$TMP/ref" 2>&1
	REF=$(grep -m1 -o 'w=.*' "$TMP/ref")
	check "linreg on one host: $REF" test -n "$REF"
	MNIST=()
	if [ -n "$SANITIZED" ]; then
		echo "mnist cases skipped: a sanitizer build (several times slower)"
	elif [ -x "$B/examples/mnist" ] && [ -d "$data" ]; then
		MNIST=("$B/examples/mnist" --model lenet --kvstore dist_sync --limit 2048 --epochs 1 --data "$data")
		"$DTRAIN" launch -n 2 -s 2 -- "${MNIST[@]}" >"$TMP/ref_mnist" 2>&1
		REF_MNIST=$(grep -m1 -o 'Validation-accuracy=.*' "$TMP/ref_mnist")
		check "mnist on one host: $REF_MNIST" test -n "$REF_MNIST"
	else
		echo "mnist cases skipped: no Fashion-MNIST in $data"
	fi
	cat >"$TMP/failw" <<EOS
#!/bin/sh
r=\${OMPI_COMM_WORLD_RANK:-\${SLURM_PROCID:-\$DMLC_WORKER_ID}}
if [ "\$DMLC_ROLE" = worker ] && [ "\$r" = 1 ]; then
	sleep 1; date +%s%N >"$TMP/failed_at"; exit 3
fi
exec "$B/examples/linreg" --kvstore dist_sync --epochs 100000
EOS
	cat >"$TMP/stubborn" <<EOS
#!/bin/bash
trap '' HUP
sleep 300 &
exec "$B/examples/linreg" --kvstore dist_sync --epochs 100000
EOS
	chmod +x "$TMP/failw" "$TMP/stubborn"
}
