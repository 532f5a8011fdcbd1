#!/bin/bash
# The entrypoint of sweeper-postgres (tools/cluster/images/postgres.Containerfile): the part of
# the official `postgres` image's contract that manifests/postgres.yaml relies on, for Debian's
# own PostgreSQL package.
#
# - POSTGRES_PASSWORD (required), POSTGRES_USER (default postgres), POSTGRES_DB (default: the
#   user), PGDATA (default /var/lib/postgresql/data), POSTGRES_INITDB_ARGS, and *.sh / *.sql
#   files in /docker-entrypoint-initdb.d, run once after the first initdb.
# - First start: initdb PGDATA with that superuser and password, the database, remote (TCP)
#   connections with scram-sha-256 from any address, the unix socket trusted (the server's own
#   container only). Every start: exec postgres in the foreground as PID 1.
# - Arguments that start with "-" are postgres options (`args: ["-c", "max_connections=200"]`).
# - Runs as the postgres user (uid 999, the manifest's runAsUser) under readOnlyRootFilesystem:
#   it writes only PGDATA, /var/run/postgresql and /tmp. Started as root (docker run --user 0)
#   it fixes the ownership of those and re-executes itself as postgres, like the official image.
set -Eeuo pipefail

log() { echo "postgres-entrypoint: $*" >&2; }

if [[ $# -eq 0 || "${1:0:1}" == "-" ]]; then
	set -- postgres "$@"
fi
if [[ "$1" != postgres ]]; then
	exec "$@"
fi

: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
export PGDATA

if [[ "$(id -u)" == 0 ]]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 00700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

# The data volume's root may hold lost+found, so PGDATA is usually a subdirectory of it; with
# fsGroup the volume is group-writable, so the server's uid can create it. 00700 also clears the
# setgid bit fsGroup leaves on new directories.
mkdir -p "$PGDATA"
chmod 00700 "$PGDATA" 2>/dev/null || true

if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
	if [[ -z "${POSTGRES_PASSWORD:-}" ]]; then
		log "PGDATA ($PGDATA) holds no database and POSTGRES_PASSWORD is empty; set POSTGRES_PASSWORD"
		exit 1
	fi
	log "initialising $PGDATA (superuser $POSTGRES_USER, database $POSTGRES_DB)"
	# shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a list of options, as in the official image
	initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
		--auth-local=trust --auth-host=scram-sha-256 ${POSTGRES_INITDB_ARGS:-} >&2
	{
		echo
		echo "# postgres-entrypoint: remote clients authenticate with their password"
		echo "host all all all scram-sha-256"
	} >> "$PGDATA/pg_hba.conf"
	echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"

	# A server on the unix socket only, for the database and the init scripts.
	pg_ctl --pgdata="$PGDATA" --wait --silent --options="-c listen_addresses='' -p 5432" start >&2
	psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username="$POSTGRES_USER" --host=/var/run/postgresql)
	if [[ "$POSTGRES_DB" != postgres ]]; then
		"${psql[@]}" --dbname=postgres --set db="$POSTGRES_DB" -q <<-'SQL'
			CREATE DATABASE :"db";
		SQL
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
			*.sh)
				log "running $f"
				# shellcheck disable=SC1090  # the image user's scripts
				. "$f"
				;;
			*.sql) log "running $f"; "${psql[@]}" --dbname="$POSTGRES_DB" -q -f "$f" ;;
			*) [[ -e "$f" ]] && log "ignoring $f" ;;
		esac
	done
	pg_ctl --pgdata="$PGDATA" --wait --silent --mode=fast stop >&2
	log "initialised; starting the server"
fi

exec "$@"
