# Installs PostgreSQL from Debian's packages (if missing), starts a private
# throw-away cluster on 127.0.0.1, and exports its DSN for the account
# store tests:
#
#   OVERWORLD_TEST_POSTGRES=postgres://overworld@127.0.0.1:54329/overworld_test?sslmode=disable
#
# Source it (". .ci/postgres.sh") so the export reaches the caller. It is
# idempotent: a cluster it already started is reused. Stop it with
# "overworld_pg_stop". Nothing listens beyond loopback.

overworld_pg_port=${OVERWORLD_PG_PORT:-54329}
overworld_pg_dir=${OVERWORLD_PG_DIR:-/tmp/overworld-pg}

overworld_pg_bin() {
	ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

overworld_pg_setup() {
	if [ -z "$(overworld_pg_bin)" ]; then
		echo "postgres.sh: installing postgresql from Debian packages" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >&2 || return 1
		apt-get install -y -qq postgresql >&2 || return 1
	fi
	local bin
	bin=$(overworld_pg_bin)
	# initdb and the server refuse to run as root; use the postgres user
	# the Debian package creates, or ourselves when not root.
	local as=""
	if [ "$(id -u)" = 0 ]; then
		as="runuser -u postgres --"
	fi
	if ! $as "$bin/pg_isready" -q -h 127.0.0.1 -p "$overworld_pg_port"; then
		rm -rf "$overworld_pg_dir"
		mkdir -p "$overworld_pg_dir"
		if [ -n "$as" ]; then chown postgres "$overworld_pg_dir"; fi
		$as "$bin/initdb" -D "$overworld_pg_dir/data" -U overworld --auth=trust -E UTF8 >"$overworld_pg_dir/initdb.log" 2>&1 || {
			cat "$overworld_pg_dir/initdb.log" >&2
			return 1
		}
		$as "$bin/pg_ctl" -D "$overworld_pg_dir/data" -l "$overworld_pg_dir/server.log" -w -t 60 \
			-o "-c listen_addresses=127.0.0.1 -p $overworld_pg_port -k $overworld_pg_dir -c fsync=off -c max_connections=200" start >&2 || {
			cat "$overworld_pg_dir/server.log" >&2
			return 1
		}
		$as "$bin/createdb" -h 127.0.0.1 -p "$overworld_pg_port" -U overworld overworld_test || return 1
	fi
	export OVERWORLD_TEST_POSTGRES="postgres://overworld@127.0.0.1:$overworld_pg_port/overworld_test?sslmode=disable"
	echo "postgres.sh: OVERWORLD_TEST_POSTGRES=$OVERWORLD_TEST_POSTGRES" >&2
}

overworld_pg_stop() {
	local bin as=""
	bin=$(overworld_pg_bin)
	if [ "$(id -u)" = 0 ]; then as="runuser -u postgres --"; fi
	[ -n "$bin" ] && $as "$bin/pg_ctl" -D "$overworld_pg_dir/data" -m fast stop >&2
}

overworld_pg_setup || echo "postgres.sh: PostgreSQL not available; PostgreSQL store tests will be skipped" >&2
