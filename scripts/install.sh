#!/usr/bin/env bash
# Installs scanstore for systemd: the binary, the configuration directory, the unit and
# the dedicated system user. Idempotent: a second run replaces the binary and the unit but
# never overwrites an existing configuration or environment file.
#
#   sudo scripts/install.sh [--binary PATH] [--prefix DIR] [--no-user] [--no-systemctl]
#
#   --binary PATH    the scanstore binary (default: target/release/scanstore, else
#                    target/debug/scanstore, relative to the repository)
#   --prefix DIR     install under DIR instead of / (packaging, tests); implies
#                    --no-user and --no-systemctl. DESTDIR=DIR does the same.
#   --no-user        do not create the scanstore system user and group
#   --no-systemctl   do not run systemctl daemon-reload
#
# Lays out:
#   DIR/usr/local/bin/scanstore                     0755
#   DIR/usr/local/bin/scanstore-client              0755 (beside the binary, when built)
#   DIR/etc/scanstore/                              0750 root:scanstore
#   DIR/etc/scanstore/scanstore.toml                0640 root:scanstore (from the example)
#   DIR/etc/scanstore/scanstore.env                 0600 root:root (template, secrets)
#   DIR/etc/systemd/system/scanstore.service        0644
#   DIR/usr/local/share/doc/scanstore/README.md     0644
#   DIR/usr/local/share/doc/scanstore/scanner-api.md 0644
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${DESTDIR:-}
binary=
make_user=1
reload=1

usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case $1 in
    --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary=$2; shift 2 ;;
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
    --no-user) make_user=0; shift ;;
    --no-systemctl) reload=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

if [ -n "$prefix" ]; then
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
  make_user=0
  reload=0
fi

if [ -z "$binary" ]; then
  for candidate in "$repo/target/release/scanstore" "$repo/target/debug/scanstore"; do
    if [ -x "$candidate" ]; then binary=$candidate; break; fi
  done
  [ -n "$binary" ] || die "no built binary found; run 'cargo build --release' or pass --binary PATH"
fi
[ -x "$binary" ] || die "$binary is not an executable file"

# Ownership: root:scanstore when the group exists and we may chown; otherwise the
# files keep the installing user (a --prefix install by an unprivileged user).
owner=""
if [ "$make_user" = 1 ]; then
  [ "$(id -u)" -eq 0 ] || die "creating the scanstore user needs root (or pass --no-user / --prefix)"
  if ! getent group scanstore >/dev/null; then
    groupadd --system scanstore
  fi
  if ! getent passwd scanstore >/dev/null; then
    useradd --system --gid scanstore --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin --comment "scanstore storage server" scanstore
  fi
fi
if [ "$(id -u)" -eq 0 ] && getent group scanstore >/dev/null && [ -z "$prefix" ]; then
  owner=root:scanstore
fi

etc="$prefix/etc/scanstore"
install -d -m 0755 "$prefix/usr/local/bin" "$prefix/etc/systemd/system" \
  "$prefix/usr/local/share/doc/scanstore"
install -d -m 0750 "$etc"
[ -z "$owner" ] || chown "$owner" "$etc"

# The binary: replaced atomically (install writes a new file), so a running instance
# keeps its old inode until it is restarted.
install -m 0755 "$binary" "$prefix/usr/local/bin/scanstore"
# The reference scanner client, built with it.
client="$(dirname "$binary")/scanstore-client"
if [ -x "$client" ]; then
  install -m 0755 "$client" "$prefix/usr/local/bin/scanstore-client"
fi

if [ -e "$etc/scanstore.toml" ]; then
  echo "kept existing $etc/scanstore.toml"
else
  install -m 0640 "$repo/scripts/scanstore.example.toml" "$etc/scanstore.toml"
  [ -z "$owner" ] || chown "$owner" "$etc/scanstore.toml"
  echo "installed $etc/scanstore.toml (edit it, then: scanstore check-config $etc/scanstore.toml)"
fi

if [ -e "$etc/scanstore.env" ]; then
  echo "kept existing $etc/scanstore.env"
else
  umask_before=$(umask)
  umask 077
  cat >"$etc/scanstore.env" <<'ENV'
# Secrets for scanstore.service (EnvironmentFile). Keep this file 0600 root:root.
# SCANSTORE_DATABASE_URL=postgresql://scanstore:PASSWORD@127.0.0.1:5432/scanstore
# SCANSTORE_ES_URL=http://127.0.0.1:9200
ENV
  umask "$umask_before"
  chmod 0600 "$etc/scanstore.env"
  echo "installed $etc/scanstore.env (put the database URL with its password here)"
fi

install -m 0644 "$repo/scripts/systemd/scanstore.service" "$prefix/etc/systemd/system/scanstore.service"
install -m 0644 "$repo/README.md" "$prefix/usr/local/share/doc/scanstore/README.md"
install -m 0644 "$repo/docs/scanner-api.md" "$prefix/usr/local/share/doc/scanstore/scanner-api.md"

if [ "$reload" = 1 ] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi

echo "installed scanstore into ${prefix:-/}"
if [ -z "$prefix" ]; then
  echo "next: edit /etc/scanstore/scanstore.toml and scanstore.env, then"
  echo "      systemctl enable --now scanstore && systemctl status scanstore"
fi
