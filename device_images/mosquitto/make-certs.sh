#!/usr/bin/env bash
# Certificates for the edge-sdk broker (edge-sdk.conf): a CA, the broker's certificate, and one
# client certificate per device (common name = device id) or operator ("monitor").
#
#   make-certs.sh DIR ca                         DIR/ca.pem, DIR/ca.key (keep ca.key offline)
#   make-certs.sh DIR server NAME_OR_IP...       DIR/server.pem, DIR/server.key
#   make-certs.sh DIR client NAME                DIR/NAME.pem, DIR/NAME.key
#
# Files that exist are kept (running it again changes nothing); delete one to make it anew.
# Keys are EC P-256, written 0600. DAYS (default 825) sets the validity.
set -euo pipefail

usage() {
  echo "usage: $0 DIR ca | DIR server NAME_OR_IP... | DIR client NAME" >&2
  exit 2
}

[ "$#" -ge 2 ] || usage
dir=$1
kind=$2
shift 2
days=${DAYS:-825}
umask 077
mkdir -p "$dir"

keygen=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

exists() {
  if [ -e "$1" ]; then
    echo "kept    $1"
    return 0
  fi
  return 1
}

sign() {  # sign NAME CN EXTFILE
  local name=$1 cn=$2 ext=$3
  [ -f "$dir/ca.pem" ] && [ -f "$dir/ca.key" ] || { echo "no CA in $dir: run '$0 $dir ca' first" >&2; exit 1; }
  openssl req "${keygen[@]}" -subj "/CN=$cn" -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days "$days" -sha256 -extfile "$ext" -out "$dir/$name.pem" 2>/dev/null
  rm -f "$dir/$name.csr"
  chmod 0644 "$dir/$name.pem"
  echo "made    $dir/$name.pem (CN=$cn)"
}

case "$kind" in
  ca)
    [ "$#" -eq 0 ] || usage
    exists "$dir/ca.pem" && exit 0
    openssl req -x509 "${keygen[@]}" -days "$days" -sha256 -subj "/CN=edge-sdk fleet CA" \
      -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
    chmod 0644 "$dir/ca.pem"
    echo "made    $dir/ca.pem"
    ;;
  server)
    [ "$#" -ge 1 ] || usage
    exists "$dir/server.pem" && exit 0
    san=""
    for name in "$@"; do
      if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then entry="IP:$name"; else entry="DNS:$name"; fi
      san="${san:+$san,}$entry"
    done
    ext=$(mktemp)
    trap 'rm -f "$ext"' EXIT
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" > "$ext"
    sign server "$1" "$ext"
    ;;
  client)
    [ "$#" -eq 1 ] || usage
    name=$1
    if ! [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || [ "$name" = ca ] || [ "$name" = server ]; then
      echo "client name '$name': use letters, digits, '-', '_' and '.' only (it is the <id> in edge-sdk/<id>/...)" >&2
      exit 2
    fi
    exists "$dir/$name.pem" && exit 0
    ext=$(mktemp)
    trap 'rm -f "$ext"' EXIT
    printf 'extendedKeyUsage=clientAuth\n' > "$ext"
    sign "$name" "$name" "$ext"
    ;;
  *)
    usage
    ;;
esac
