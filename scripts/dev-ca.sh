#!/usr/bin/env bash
# A throwaway CA and a certificate for 127.0.0.1 and localhost signed by it, made with
# Debian's openssl, for local secure runs (scripts/dev.sh, scanstore-bench --tls):
#
#   scripts/dev-ca.sh DIR    # writes DIR/ca.pem, DIR/server.pem, DIR/server.key (0600)
set -euo pipefail
dir=$1
mkdir -p "$dir"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -subj "/CN=scanstore dev CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
  -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
  -CAcreateserial -days 30 -out "$dir/server.pem" 2>/dev/null \
  -extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n')
chmod 644 "$dir/ca.pem" "$dir/server.pem"
