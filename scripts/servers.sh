# shellcheck shell=bash
# Start and stop real servers on loopback ports for integration tests and
# benchmarks. Sourced by integration.sh and bench.sh; every process started here
# is recorded and stopped by dpcs_stop_servers (installed as an EXIT trap).
#
#   dpcs_install            apt-get install redis-server mariadb-server kcat when missing
#   dpcs_install_browser    apt-get install chromium and a Korean font when missing
#                                                     -> DPCS_TEST_REQUIRE_BROWSER=1
#   dpcs_start_redis        single redis-server        -> DPCS_TEST_REDIS_ADDR
#   dpcs_start_cluster      3-node Redis Cluster      -> DPCS_TEST_REDIS_CLUSTER
#                           with a replica per master when DPCS_CLUSTER_REPLICA_PORTS
#                           is set                    -> DPCS_TEST_REDIS_CLUSTER_REPLICAS=1
#   dpcs_start_replica      redis-server + 1 replica  -> DPCS_TEST_REDIS_PRIMARY_ADDR,
#                                                        DPCS_TEST_REDIS_REPLICA_ADDR
#   dpcs_start_mariadb      MariaDB, database "dpcs"  -> DPCS_TEST_MYSQL_DSN
#
# Ports: each variable below may be set by the caller; unset, the servers take
# the first free ports from a fixed start (26379, 26380, 27001, 23306), skipping
# any a socket on this machine holds.

DPCS_PIDS=()
DPCS_PICKED=" "
DPCS_TMP=$(mktemp -d /tmp/dpcs-servers.XXXXXX)

dpcs_log() { printf '[servers] %s\n' "$*" >&2; }

# dpcs_port_used port: whether any TCP socket (listening or connected, IPv4 or
# IPv6) has the local port, from /proc (no ss or netstat needed). A connection's
# ephemeral port blocks a listener as surely as another server does.
dpcs_port_used() {
	local hex
	hex=$(printf ':%04X ' "$1")
	grep -qs -- "^ *[0-9]*: [0-9A-F]*$hex" /proc/net/tcp /proc/net/tcp6
}

# dpcs_cluster_bus port: the node's cluster bus port. Redis's default, port +
# 10000, puts 27001-27006 in Linux's ephemeral range (32768-60999), where an
# outgoing connection may hold it; from 11025 up the bus takes port - 10000.
dpcs_cluster_bus() {
	if [ "$1" -le 11024 ]; then echo $(($1 + 10000)); else echo $(($1 - 10000)); fi
}

# dpcs_pick var start count [bus]: sets var to count free ports from start on,
# none picked before; with "bus", each port's cluster bus port is free too.
dpcs_pick() {
	local var=$1 port=$2 count=$3 bus=${4:-} got=()
	while [ ${#got[@]} -lt "$count" ] && [ "$port" -lt 32768 ]; do
		if ! dpcs_port_used "$port" && [[ $DPCS_PICKED != *" $port "* ]] &&
			{ [ -z "$bus" ] || ! dpcs_port_used "$(dpcs_cluster_bus "$port")"; }; then
			got+=("$port")
			DPCS_PICKED+="$port "
		fi
		port=$((port + 1))
	done
	printf -v "$var" '%s' "${got[*]}"
}

[ -n "${DPCS_REDIS_PORT:-}" ] || dpcs_pick DPCS_REDIS_PORT 26379 1
[ -n "${DPCS_REPLICA_PORTS:-}" ] || dpcs_pick DPCS_REPLICA_PORTS 26380 2 # primary, replica
[ -n "${DPCS_CLUSTER_PORTS:-}" ] || dpcs_pick DPCS_CLUSTER_PORTS 27001 3 bus
[ -n "${DPCS_MYSQL_PORT:-}" ] || dpcs_pick DPCS_MYSQL_PORT 23306 1

dpcs_stop_servers() {
	local pid
	for pid in "${DPCS_PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${DPCS_PIDS[@]}"; do
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	DPCS_PIDS=()
	rm -rf "$DPCS_TMP"
}

dpcs_install() {
	local missing=()
	command -v redis-server >/dev/null || missing+=(redis-server)
	command -v redis-cli >/dev/null || missing+=(redis-tools)
	command -v mariadbd >/dev/null || missing+=(mariadb-server)
	command -v kcat >/dev/null || missing+=(kcat)
	if [ ${#missing[@]} -gt 0 ]; then
		dpcs_log "installing ${missing[*]}"
		apt-get update -q >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server redis-tools mariadb-server kcat >/dev/null
	fi
}

# Debian's Chromium for the browser tests (internal/testenv/browsertest), with a
# Korean font (the family app is Korean by default; without one, screenshots
# show boxes). The browser tests fail rather than skip from here on.
dpcs_install_browser() {
	local missing=()
	[ -x /usr/bin/chromium ] || missing+=(chromium)
	[ -d /usr/share/fonts/truetype/nanum ] || missing+=(fonts-nanum)
	if [ ${#missing[@]} -gt 0 ]; then
		dpcs_log "installing ${missing[*]}"
		apt-get update -q >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
	fi
	export DPCS_TEST_REQUIRE_BROWSER=1
}

dpcs_wait() { # dpcs_wait what seconds cmd...
	local what=$1 secs=$2
	shift 2
	for _ in $(seq 1 $((secs * 10))); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	dpcs_log "$what did not become ready in ${secs}s"
	return 1
}

dpcs_redis() { # dpcs_redis port [extra args...]
	local port=$1 pid
	shift
	if dpcs_port_used "$port"; then
		dpcs_log "redis :$port: the port is in use"
		return 1
	fi
	mkdir -p "$DPCS_TMP/redis-$port"
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$DPCS_TMP/redis-$port" --daemonize no "$@" \
		>"$DPCS_TMP/redis-$port.log" 2>&1 &
	pid=$!
	DPCS_PIDS+=("$pid")
	if ! dpcs_wait "redis :$port" 10 redis-cli -p "$port" ping; then
		kill -0 "$pid" 2>/dev/null || dpcs_log "redis :$port exited"
		tail -n 20 "$DPCS_TMP/redis-$port.log" >&2
		return 1
	fi
}

dpcs_start_redis() {
	dpcs_redis "$DPCS_REDIS_PORT"
	export DPCS_TEST_REDIS_ADDR="127.0.0.1:$DPCS_REDIS_PORT"
	dpcs_log "redis at $DPCS_TEST_REDIS_ADDR"
}

# A primary and its replica, apart from DPCS_TEST_REDIS_ADDR: tests stop and
# restart its replication. Full resyncs start at once (no diskless delay).
dpcs_start_replica() {
	local primary replica
	read -r primary replica <<<"$DPCS_REPLICA_PORTS"
	dpcs_redis "$primary" --repl-diskless-sync-delay 0
	dpcs_redis "$replica" --replicaof 127.0.0.1 "$primary" --enable-debug-command local
	dpcs_wait "replica :$replica" 20 bash -c "redis-cli -p $replica info replication | grep -q master_link_status:up"
	export DPCS_TEST_REDIS_PRIMARY_ADDR="127.0.0.1:$primary" DPCS_TEST_REDIS_REPLICA_ADDR="127.0.0.1:$replica"
	dpcs_log "redis primary at $DPCS_TEST_REDIS_PRIMARY_ADDR, replica at $DPCS_TEST_REDIS_REPLICA_ADDR"
}

dpcs_start_cluster() {
	local p bus addrs=() replicas=() opts=()
	for p in $DPCS_CLUSTER_PORTS ${DPCS_CLUSTER_REPLICA_PORTS:-}; do
		bus=$(dpcs_cluster_bus "$p")
		if dpcs_port_used "$bus"; then
			dpcs_log "redis :$p: its cluster bus port $bus is in use"
			return 1
		fi
		dpcs_redis "$p" --cluster-enabled yes --cluster-config-file "$DPCS_TMP/nodes-$p.conf" \
			--cluster-port "$bus"
	done
	for p in $DPCS_CLUSTER_PORTS; do addrs+=("127.0.0.1:$p"); done
	for p in ${DPCS_CLUSTER_REPLICA_PORTS:-}; do replicas+=("127.0.0.1:$p"); done
	# With replicas, redis-cli makes the first nodes listed the masters.
	[ ${#replicas[@]} -gt 0 ] && opts=(--cluster-replicas 1)
	redis-cli --cluster create "${addrs[@]}" "${replicas[@]}" "${opts[@]}" --cluster-yes >"$DPCS_TMP/cluster-create.log" 2>&1
	for p in $DPCS_CLUSTER_PORTS ${DPCS_CLUSTER_REPLICA_PORTS:-}; do
		dpcs_wait "cluster :$p" 20 bash -c "redis-cli -p $p cluster info | grep -q cluster_state:ok"
	done
	for p in ${DPCS_CLUSTER_REPLICA_PORTS:-}; do
		dpcs_wait "cluster replica :$p" 20 bash -c "redis-cli -p $p info replication | grep -q master_link_status:up"
	done
	DPCS_TEST_REDIS_CLUSTER=$(IFS=,; echo "${addrs[*]}")
	export DPCS_TEST_REDIS_CLUSTER
	if [ ${#replicas[@]} -gt 0 ]; then export DPCS_TEST_REDIS_CLUSTER_REPLICAS=1; fi
	dpcs_log "redis cluster at $DPCS_TEST_REDIS_CLUSTER${replicas:+ with replicas ${replicas[*]}}"
}

dpcs_start_mariadb() {
	local d="$DPCS_TMP/mariadb"
	mkdir -p "$d"
	mariadb-install-db --datadir="$d/data" --user=root --auth-root-authentication-method=normal \
		>"$d/install.log" 2>&1
	mariadbd --no-defaults --datadir="$d/data" --port="$DPCS_MYSQL_PORT" --socket="$d/s.sock" \
		--bind-address=127.0.0.1 --user=root --skip-log-bin --innodb-buffer-pool-size=${DPCS_MYSQL_BUFFER_POOL:-256M} \
		--innodb-flush-log-at-trx-commit=2 >"$d/server.log" 2>&1 &
	DPCS_PIDS+=($!)
	dpcs_wait "mariadb :$DPCS_MYSQL_PORT" 30 mariadb --no-defaults -uroot --socket="$d/s.sock" -e 'select 1'
	mariadb --no-defaults -uroot --socket="$d/s.sock" -e \
		"CREATE DATABASE IF NOT EXISTS dpcs; CREATE USER IF NOT EXISTS 'dpcs'@'127.0.0.1' IDENTIFIED BY 'dpcs'; GRANT ALL ON *.* TO 'dpcs'@'127.0.0.1';"
	export DPCS_TEST_MYSQL_DSN="dpcs:dpcs@tcp(127.0.0.1:$DPCS_MYSQL_PORT)/dpcs?parseTime=true&multiStatements=true"
	dpcs_log "mariadb at 127.0.0.1:$DPCS_MYSQL_PORT"
}
