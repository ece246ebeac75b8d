#!/bin/sh
# A private PostgreSQL cluster for tests and trials of the central tier
# (docs/fleet.md): initdb into DIR/data, a server that listens only on a
# Unix socket in DIR (no TCP port to collide with), fsync on.
#
#   scripts/pg-cluster.sh start DIR   prints the libpq conninfo (a
#                                     cluster already running: the same)
#   scripts/pg-cluster.sh stop DIR [fast|immediate]
#
# PostgreSQL refuses to run as root: as root the server runs as the user
# postgres (Debian's package makes it), else nobody, and DIR is handed to
# that user (as bench/bench_ingest.c does); when that user cannot reach
# DIR (a checkout under /root), the cluster goes to a directory of its own
# under /tmp, whose name DIR/location keeps. Removing DIR after a stop is
# the caller's (and that directory's, when DIR/location names one). Exits 77 when PostgreSQL 15 is
# not installed (PG_BIN overrides where its programs are), so a test can
# report SKIP; 1 on any other failure, with the server's log on stderr.
set -eu

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

usage() {
	echo "usage: $0 start DIR | stop DIR [fast|immediate]" >&2
	exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
dir=$2
mode=${3:-fast}

if [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/pg_ctl" ]; then
	echo "$0: no $PG_BIN/initdb (Debian: apt-get install postgresql-15)" >&2
	exit 77
fi

# Who runs the server, and how a command runs as that user.
user=""
if [ "$(id -u)" -eq 0 ]; then
	for u in postgres nobody; do
		if id -u "$u" >/dev/null 2>&1; then
			user=$u
			break
		fi
	done
	[ -n "$user" ] || {
		echo "$0: running as root and there is neither a postgres nor a nobody user" >&2
		exit 1
	}
fi
as_user() {
	if [ -n "$user" ]; then
		(cd / && runuser -u "$user" -- "$@")
	else
		"$@"
	fi
}

case $cmd in
start)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	if [ -f "$dir/location" ]; then
		dir=$(cat "$dir/location")
	elif [ -n "$user" ]; then
		chown "$user" "$dir"
		# The user must reach DIR through its parents (a mkdtemp 0700).
		chmod o+x "$(dirname "$dir")" 2>/dev/null || true
		if ! as_user test -w "$dir"; then
			# DIR is out of the user's reach (a checkout under /root):
			# the cluster lives in a directory of its own, which DIR names.
			real=$(mktemp -d /tmp/receiptd-pg.XXXXXX)
			chown "$user" "$real"
			echo "$real" >"$dir/location"
			dir=$real
		fi
	fi
	chmod 0700 "$dir"
	if [ -f "$dir/data/postmaster.pid" ] &&
		as_user "$PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
		echo "host=$dir port=5432 user=receiptd dbname=postgres"
		exit 0
	fi
	if [ ! -f "$dir/data/PG_VERSION" ]; then
		# The server's files are synced when it writes them (fsync = on);
		# initdb's own sync adds seconds a test does not need.
		as_user "$PG_BIN/initdb" -D "$dir/data" -U receiptd -A trust \
			-E UTF8 --no-sync >"$dir/initdb.log" 2>&1 || {
			cat "$dir/initdb.log" >&2
			exit 1
		}
		cat >>"$dir/data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$dir'
port = 5432
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 60
shared_buffers = 32MB
EOF
	fi
	as_user "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		start >/dev/null 2>&1 || {
		cat "$dir/server.log" >&2
		exit 1
	}
	echo "host=$dir port=5432 user=receiptd dbname=postgres"
	;;
stop)
	case $mode in
	fast | immediate) ;;
	*) usage ;;
	esac
	[ -d "$dir" ] || exit 0
	dir=$(cd "$dir" && pwd)
	[ -f "$dir/location" ] && dir=$(cat "$dir/location")
	[ -f "$dir/data/PG_VERSION" ] || exit 0
	if ! as_user "$PG_BIN/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop \
		>/dev/null 2>&1; then
		# Not running is stopped; running still is a failure.
		if as_user "$PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
			echo "$0: the server in $dir did not stop" >&2
			exit 1
		fi
	fi
	;;
*)
	usage
	;;
esac
