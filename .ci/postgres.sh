# Sourced by .ci/run (bash): start_postgres starts a throwaway PostgreSQL cluster from Debian's package
# (postgresql-15), owned by an unprivileged user, listening on a free loopback port (and a socket in its folder), and
# exports STUDY_TEST_DATABASE_URL for the database-backed study tests (tests/study/conftest.py);
# stop_postgres stops it and deletes it. Locally, as root or as yourself:
#   source .ci/postgres.sh && start_postgres && pytest tests/study -m database -n 0; stop_postgres

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"

_as_pg_user() {  # initdb and postgres refuse to run as root: root runs them as the package's postgres user
    if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi  # from /: the clone may be private
}

start_postgres() {
    if [ ! -x "$PG_BIN/initdb" ]; then
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
    fi
    PG_DIR="$(mktemp -d /tmp/ci-postgres.XXXXXX)"
    [ "$(id -u)" = 0 ] && chown postgres: "$PG_DIR"
    _as_pg_user "$PG_BIN/initdb" -D "$PG_DIR/data" -U study -A trust --no-sync -E UTF8 >"$PG_DIR/initdb.log"
    # Loopback only; a URL without '?' or '=', which Hydra overrides (database_url=...) take unquoted.
    PG_PORT="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    _as_pg_user "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c max_connections=200" start >/dev/null
    _as_pg_user "$PG_BIN/createdb" -h "$PG_DIR" -p "$PG_PORT" -U study study
    export STUDY_TEST_DATABASE_URL="postgresql+psycopg://study@127.0.0.1:$PG_PORT/study"
    echo "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') at $PG_DIR"
}

stop_postgres() {
    if [ -n "${PG_DIR:-}" ] && [ -d "$PG_DIR/data" ]; then
        _as_pg_user "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null || true
        rm -rf "$PG_DIR"
    fi
    unset STUDY_TEST_DATABASE_URL PG_DIR PG_PORT
}
