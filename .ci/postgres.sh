#!/usr/bin/env bash
# Starts a throwaway PostgreSQL for the memory-store tests and prints
#   export CONTEXT_ASSEMBLER_TEST_POSTGRES_URL=postgres://...
#   export CONTEXT_ASSEMBLER_TEST_POSTGRES_CA=.../ca.crt
# on stdout (everything else goes to stderr), so CI can run
#   eval "$(bash .ci/postgres.sh)"
# The cluster listens on 127.0.0.1 only, trusts every local connection and
# lives in a fresh temporary directory; each run starts a new one on a free
# port. It serves TLS (ssl=on) with a certificate for 127.0.0.1 and
# localhost signed by a throwaway CA, whose certificate is exported for
# sslrootcert= (tests/stores/postgres_tls.rs); plaintext connections are still
# accepted. Installs the Debian package when no server binaries are present.
set -euo pipefail
exec 3>&1 1>&2 # fd 3 is the real stdout; everything else goes to stderr.

newest_initdb() { printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1; }

initdb=$(newest_initdb)
if [ ! -x "$initdb" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends postgresql ||
        { apt-get update && apt-get install -y --no-install-recommends postgresql; }
    initdb=$(newest_initdb)
    [ -x "$initdb" ] || { echo "postgres.sh: no initdb after installing postgresql" >&2; exit 1; }
fi
bin=$(dirname "$initdb")

# initdb refuses to run as root: the cluster belongs to the postgres user.
as_owner=()
if [ "$(id -u)" -eq 0 ]; then
    id -u postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    as_owner=(runuser -u postgres --)
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/ca-postgres.XXXXXX")
mkdir "$dir/sock"
[ ${#as_owner[@]} -eq 0 ] || chown -R postgres "$dir"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' ||
    echo $((55432 + RANDOM % 1000)))

"${as_owner[@]}" "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale >/dev/null

# A throwaway CA and a server certificate for 127.0.0.1 and localhost.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=context-assembler test CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$dir/data/server.key" -out "$dir/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/san.ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 2 -extfile "$dir/san.ext" -out "$dir/data/server.crt" 2>/dev/null
chmod 600 "$dir/data/server.key"
[ ${#as_owner[@]} -eq 0 ] || chown postgres "$dir/data/server.key" "$dir/data/server.crt"
chmod 644 "$dir/ca.crt"
# fsync off: the cluster is thrown away, and the tests need not wait on disks.
# 3>&- : the server must not hold the caller's $(...) pipe open.
if ! "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/sock -c fsync=off -c ssl=on" start 3>&-; then
    cat "$dir/server.log" >&2 || true
    exit 1
fi
"$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres context_assembler_test

echo "postgres.sh: $("$bin/postgres" --version) on 127.0.0.1:$port;" \
    "stop with: ${as_owner[*]} $bin/pg_ctl -D $dir/data stop" >&2
echo "export CONTEXT_ASSEMBLER_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$port/context_assembler_test" >&3
echo "export CONTEXT_ASSEMBLER_TEST_POSTGRES_CA=$dir/ca.crt" >&3
