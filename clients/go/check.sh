#!/usr/bin/env bash
# The Go package's check (called by .ci/clients.sh): (1) regenerates assemblerv1/ from proto/
# with buf into a scratch copy and fails with the diff when it differs from the checked-in code;
# (2) builds the module, runs `go vet` and `go test` against the servers at ADDR (with a memory
# store), ADDR_NO_MEMORY (without one) and UNIX_ADDR (on a Unix socket, unix:/path); (3) tries it
# as a new user: an empty module requires this one through a local `replace`, compiles the
# program from README.md's Go section as it is written there, runs it against ADDR and checks
# what it prints.
# Usage: clients/go/check.sh OUT ADDR ADDR_NO_MEMORY UNIX_ADDR
#
# Offline: nothing is fetched. The checked-in go.mod names real module versions (what a team
# with network builds against); here each module of the build list is replaced by Debian's
# source in /usr/share/gocode/src (or by an empty stub when no package of it is imported),
# through a copy of go.mod under OUT passed with -modfile. Go's caches go under OUT when there
# is no HOME.
set -euo pipefail

usage="usage: clients/go/check.sh OUT ADDR ADDR_NO_MEMORY UNIX_ADDR"
out="${1:?$usage}"
addr="${2:?$usage}"
addr_no_memory="${3:?$usage}"
unix_addr="${4:?$usage}"
pkg="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$pkg/../.." && pwd)"
gocode="${GOCODE:-/usr/share/gocode/src}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

started=$SECONDS
step() { echo "--- go [$((SECONDS - started))s] $*"; }

export GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOFLAGS= GO111MODULE=on GOWORK=off
if [[ -z "${HOME:-}" ]]; then
  export GOCACHE="$out/cache/build" GOMODCACHE="$out/cache/mod" GOPATH="$out/cache/gopath"
fi

# offline_modfile SRC DEST: DEST is the go.mod SRC plus a `replace` for every module its
# requirements reach: Debian's source when it has a go.mod there, else an empty stub module.
# A `replace` already in SRC is kept and wins.
offline_modfile() {
  local src="$1" dest="$2" stubs="$out/stubs" mod dir
  local -A seen=()
  local queue=()
  requires() { # the module paths a go.mod requires
    awk '/^require[ \t]*\($/ {inb=1; next} inb && /^\)/ {inb=0; next}
         inb && NF >= 2 && $1 !~ /^\/\// {print $1}
         /^require[ \t]+[^( \t]/ {print $2}' "$1"
  }
  mapfile -t queue < <(requires "$src")
  # A module SRC replaces by a directory (this checkout) is kept; its requirements are walked.
  while read -r mod dir; do
    seen[$mod]=1
    if [[ -f "$dir/go.mod" ]]; then
      mapfile -t -O "${#queue[@]}" queue < <(requires "$dir/go.mod")
    fi
  done < <(awk '/^replace/ && $3 == "=>" && $4 ~ /^[.\/]/ {print $2, $4}' "$src")
  cp "$src" "$dest"
  echo >>"$dest"
  while ((${#queue[@]})); do
    mod="${queue[0]}"
    queue=("${queue[@]:1}")
    [[ -n "${seen[$mod]:-}" ]] && continue
    seen[$mod]=1
    dir="$gocode/$mod"
    if [[ -f "$dir/go.mod" ]] && [[ "$(awk '$1 == "module" {print $2; exit}' "$dir/go.mod")" == "$mod" ]]; then
      mapfile -t -O "${#queue[@]}" queue < <(requires "$dir/go.mod")
    else
      dir="$stubs/$mod"
      mkdir -p "$dir"
      printf 'module %s\n' "$mod" >"$dir/go.mod"
    fi
    echo "replace $mod => $dir" >>"$dest"
  done
}

step "regenerate assemblerv1/ with buf and compare"
command -v buf >/dev/null || { echo "go: no buf on PATH (bash .ci/buf.sh installs it)" >&2; exit 1; }
scratch="$out/regen"
rm -rf "$scratch"
mkdir -p "$scratch/clients/go"
cp -r "$root/proto" "$scratch/proto"
# Only the Go plugins' entries of proto/buf.gen.yaml: the other packages check their own.
awk '/^plugins:/ {print; inp=1; next}
     inp && /^  - / {flush(); entry = $0 "\n"; next}
     inp && /^    / {entry = entry $0 "\n"; next}
     inp && !/^  / {flush(); inp=0}
     !inp {print}
     function flush() { if (entry ~ /out: \.\.\/clients\/go\n/) printf "%s", entry; entry = "" }
     END {flush()}' "$root/proto/buf.gen.yaml" >"$scratch/buf.gen.go.yaml"
grep -q 'protoc-gen-go-grpc' "$scratch/buf.gen.go.yaml" || {
  echo "go: proto/buf.gen.yaml has no protoc-gen-go-grpc entry writing to ../clients/go" >&2; exit 1; }
(cd "$scratch/proto" && buf generate --template "$scratch/buf.gen.go.yaml")
if ! diff -ru "$pkg/assemblerv1" "$scratch/clients/go/assemblerv1"; then
  echo "go: FAILED: clients/go/assemblerv1 differs from what buf generates now (the diff above);" \
    "regenerate: (cd proto && buf generate), then commit" >&2
  exit 1
fi
echo "go: the generated code is up to date"

step "build, vet and test against $addr, $addr_no_memory and $unix_addr"
modfile="$out/offline/go.mod"
mkdir -p "$out/offline"
rm -f "$out/offline/go.sum"
offline_modfile "$pkg/go.mod" "$modfile"
cd "$pkg"
# -mod=readonly: the checked-in requirements must already be complete (a network build needs
# no `go mod tidy`); only the replacements differ.
flags=(-modfile="$modfile" -mod=readonly)
go build "${flags[@]}" ./...
go vet "${flags[@]}" ./...
rc=0
CONTEXT_ASSEMBLER_ADDR="$addr" CONTEXT_ASSEMBLER_ADDR_NO_MEMORY="$addr_no_memory" \
  CONTEXT_ASSEMBLER_UNIX_ADDR="$unix_addr" CONTEXT_ASSEMBLER_REQUIRE_SERVER=1 GRPC_GO_RETRY=on \
  go test "${flags[@]}" -count=1 -v ./... >"$out/test.log" 2>&1 || rc=$?
if ((rc)); then
  cat "$out/test.log"
  echo "go: FAILED: go test (exit $rc)" >&2
  exit 1
fi
grep -E '^(--- |ok )' "$out/test.log"
# With every server given, nothing may skip (GRPC_GO_RETRY=on: grpc-go before 1.40 applies the
# retry policy only with it; the retry test skips without it).
if grep -q -- '--- SKIP' "$out/test.log"; then
  echo "go: FAILED: tests skipped with both servers given (log: $out/test.log)" >&2
  exit 1
fi
echo "go: $(grep -c -- '--- PASS' "$out/test.log") tests passed"

step "a new user: an empty module, the program from README.md's Go section"
quick="$out/quickstart"
rm -rf "$quick"
mkdir -p "$quick"
module="$(awk '$1 == "module" {print $2; exit}' "$pkg/go.mod")"
# The README's program, exactly as written between the markers.
awk '/<!-- go-quickstart-program:begin -->/ {on=1; next} /<!-- go-quickstart-program:end -->/ {on=0}
     on && !/^```/ {print}' "$root/README.md" >"$quick/main.go"
[[ -s "$quick/main.go" ]] || { echo "go: FAILED: no program between the go-quickstart-program markers in README.md" >&2; exit 1; }
(
  cd "$quick"
  go mod init example.com/quickstart >/dev/null 2>&1
  # As the README says: require the module, replaced by the checkout (a user with network runs
  # `go get` instead); then the offline copy of go.mod for the module's own requirements, which
  # the build adds to it as `go get` would.
  go mod edit -require="$module@v0.0.0" -replace="$module=$pkg"
  offline_modfile go.mod "$quick/offline.mod"
  go build -modfile="$quick/offline.mod" -mod=mod -o quickstart .
  ./quickstart "$addr" | tee output.txt
)
# What the README's program asks for: the query last, the evidence rendered, the usage.
want() {
  grep -qE "$1" "$quick/output.txt" || { echo "go: FAILED: the README's program printed no line matching /$1/" >&2; exit 1; }
}
want '^ROLE_SYSTEM: You are the support assistant\.'
want 'Refunds take 5 days\.'
want '^ROLE_USER: How long do refunds take\?$'
want '^[1-9][0-9]* tokens of [1-9][0-9]*$'
echo "go: the package passed (regeneration, build, vet, tests, README program)"
