# Throwaway PostgreSQL clusters for tests and local runs (sourced, not executed).
# initdb refuses to run as root, so as root the cluster runs as the unprivileged `postgres`
# user; as anyone else it runs as that user.

# Prints the newest installed PostgreSQL bin directory, installing the server from
# Debian's packages when none is present.
pg_bin_dir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$dir" ] || [ ! -x "$dir/initdb" ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "PostgreSQL server binaries not found; install the Debian package 'postgresql'." >&2
      return 1
    fi
    echo "Installing PostgreSQL from Debian's packages..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-contrib >/dev/null
    dir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  echo "$dir"
}

# Runs a command as the cluster's owner.
pg_as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# A free TCP port on the loopback interface.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# pg_start DATADIR PORT: creates the cluster if needed and starts it on 127.0.0.1:PORT.
# Durability is switched off: these clusters hold nothing worth keeping. PG_PRELOAD sets
# shared_preload_libraries (default pg_stat_statements; empty for none). PG_TLS_DIR (a
# directory with server.pem and server.key) makes a TLS-only cluster: ssl = on with that
# certificate, and pg_hba.conf refusing every connection without TLS.
pg_start() {
  local data=$1 port=$2 bin
  bin=$(pg_bin_dir) || return 1
  mkdir -p "$data"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres "$data"
    chmod 700 "$data"
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    pg_as_owner "$bin/initdb" -D "$data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 >/dev/null || return 1
    cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 400
shared_preload_libraries = '${PG_PRELOAD-pg_stat_statements}'
CONF
    if [ -n "${PG_TLS_DIR:-}" ]; then
      cp "$PG_TLS_DIR/server.pem" "$data/server.crt"
      cp "$PG_TLS_DIR/server.key" "$data/server.key"
      chmod 600 "$data/server.key"
      [ "$(id -u)" -eq 0 ] && chown postgres "$data/server.crt" "$data/server.key"
      printf "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n" >>"$data/postgresql.conf"
      printf 'hostssl all all 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 reject\n' >"$data/pg_hba.conf"
    fi
  fi
  pg_as_owner "$bin/pg_ctl" -D "$data" -o "-p $port" -l "$data/server.log" -w -t 60 start >/dev/null || {
    cat "$data/server.log" >&2
    return 1
  }
}

# pg_stop DATADIR
pg_stop() {
  local data=$1 bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$bin" ] && [ -f "$data/postmaster.pid" ] && pg_as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1
  return 0
}
