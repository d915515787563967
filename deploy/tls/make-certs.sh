#!/bin/sh
# Makes what the fleet's mutual TLS needs (--tls_ca_file, --tls_cert_file, --tls_key_file):
# a CA (DIR/ca.pem, DIR/ca.key: keep the key off the fleet's machines) and, for each NAME,
# a certificate DIR/NAME.pem with its key DIR/NAME.key, valid for DAYS (default 365).
# Every certificate names DNS "switchyard", the name fleet channels check.
#
#   deploy/tls/make-certs.sh DIR [NAME...]      (default NAME: fleet)
#   SWITCHYARD_CERT_DAYS=30 deploy/tls/make-certs.sh certs rm proxy worker ops
#
# An existing CA in DIR is reused, so more certificates can be added later.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 DIR [NAME...]" >&2; exit 2; }
dir=$1
shift
[ $# -ge 1 ] || set -- fleet
days=${SWITCHYARD_CERT_DAYS:-365}
mkdir -p "$dir"
umask 077
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
if [ ! -f "$dir/ca.pem" ]; then
  # shellcheck disable=SC2086
  openssl req -x509 $ec -keyout "$dir/ca.key" -out "$dir/ca.pem" -days "$days" \
    -subj "/CN=Switchyard fleet CA" 2>/dev/null
fi
ext=$(mktemp)
trap 'rm -f "$ext" "$dir"/*.csr' EXIT
printf 'subjectAltName=DNS:switchyard\nextendedKeyUsage=serverAuth,clientAuth\n' > "$ext"
for name in "$@"; do
  # shellcheck disable=SC2086
  openssl req $ec -keyout "$dir/$name.key" -out "$dir/$name.csr" \
    -subj "/CN=switchyard $name" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/$name.pem" -days "$days" -extfile "$ext" 2>/dev/null
  echo "$dir/$name.pem $dir/$name.key"
done
