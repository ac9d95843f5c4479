#!/bin/sh
# As the official image: a first start makes the cluster, its user and database; then
# PostgreSQL runs as process 1, as the user postgres.
set -eu
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  user=${POSTGRES_USER:-postgres}
  echo "${POSTGRES_PASSWORD:?}" >/tmp/pwfile
  chown postgres /tmp/pwfile
  su postgres -s /bin/sh -c "initdb -D '$PGDATA' -U '$user' --pwfile=/tmp/pwfile \
    --auth-local=trust --auth-host=scram-sha-256" >/dev/null
  rm /tmp/pwfile
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  db=${POSTGRES_DB:-$user}
  if [ "$db" != postgres ]; then
    su postgres -s /bin/sh -c "postgres --single -D '$PGDATA' postgres" >/dev/null \
      <<SQL
CREATE DATABASE "$db" OWNER "$user";
SQL
  fi
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$@"
