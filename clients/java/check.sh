#!/usr/bin/env bash
# The Java package's check (called by .ci/clients.sh), offline: no Maven repository is reached.
#  1. Regenerates the stubs (`buf generate` from a scratch copy of proto/) and fails with the
#     diff when they differ from the checked-in src/main/java/dev/contextassembler/v1.
#  2. Builds the jar pom.xml describes, OUT/context-assembler-client-0.1.0.jar: javac compiles
#     exactly the pom's sources (src/main/java) against the same libraries from Debian's
#     packages (/usr/share/java).
#  3. Compiles src/test/java and runs the JUnit 4 tests against the sidecars at ADDR (with a
#     memory store), ADDR_NO_MEMORY (without one) and UNIX_ADDR (on a Unix socket, unix:/path).
# Everything goes under OUT; the source tree is only read.
# Needs: buf on PATH (.ci/buf.sh), protoc, grpc_java_plugin, the Go plugins buf.gen.yaml names,
# a JDK 17, the Debian Java packages of .ci/clients.sh and junit4, and python3 -m pip (it fetches
# the googleapis-common-protos package for the google/rpc protos; see README.md).
# Usage: clients/java/check.sh OUT ADDR ADDR_NO_MEMORY UNIX_ADDR
set -euo pipefail
usage="usage: check.sh OUT ADDR ADDR_NO_MEMORY UNIX_ADDR"
out="${1:?$usage}"
addr="${2:?$usage}"
addr_no_memory="${3:?$usage}"
unix_addr="${4:?$usage}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
version=0.1.0
# The google/rpc protos, from the package that ships them (see README.md: Debian's
# proto-google-common-protos 1.16 predates google.rpc.ErrorInfo).
common_protos=googleapis-common-protos==1.70.0
# Short runs: the optimising JIT costs more than it saves (about 2x here).
jvm_flags=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC)
javac_flags=(-J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -encoding UTF-8 --release 17)

started=$SECONDS
step() { echo "java: [$((SECONDS - started))s] $*"; }

# 1. Regeneration.
step "regenerate (buf generate) and compare"
regen="$out/regen"
rm -rf "$regen"
mkdir -p "$regen"
cp -r "$root/proto" "$regen/proto"
(cd "$regen/proto" && buf generate)
generated="clients/java/src/main/java"
if ! diff -ru --exclude=client "$root/$generated" "$regen/$generated" >"$out/regen.diff"; then
  echo "java: the checked-in generated code differs from what buf generate makes now" >&2
  echo "java: (regenerate: cd proto && buf generate; see clients/java/README.md):" >&2
  head -n 200 "$out/regen.diff" >&2
  exit 1
fi

# The libraries (one jar each: Debian's netty-all.jar is an empty shell, so the parts are named).
jars=(
  grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
  protobuf proto-google-common-protos guava gson perfmark-api
  geronimo-annotation-1.3-spec
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common
  netty-handler netty-handler-proxy netty-resolver netty-transport
  netty-transport-native-unix-common
)
test_jars=(junit4 hamcrest-core)
classpath_of() {
  local jar path cp=""
  for jar in "$@"; do
    path="/usr/share/java/$jar.jar"
    [[ -f "$path" ]] || { echo "java: missing $path (see clients/java/README.md)" >&2; exit 1; }
    cp+="$path:"
  done
  printf '%s' "${cp%:}"
}
libs="$(classpath_of "${jars[@]}")"
tests_libs="$(classpath_of "${test_jars[@]}")"

# google.rpc.Status, ErrorInfo, BadRequest, RetryInfo as proto-google-common-protos 2.x has them,
# ahead of Debian's older jar on the class path (never in the package's jar).
step "google/rpc protos ($common_protos)"
rpc="$out/google-rpc"
if [[ ! -f "$rpc/done" ]]; then
  rm -rf "$rpc"
  mkdir -p "$rpc/wheel" "$rpc/gen" "$rpc/classes"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$rpc/wheel" "$common_protos"
  python3 - "$rpc" <<'PY'
import glob, sys, zipfile
rpc = sys.argv[1]
with zipfile.ZipFile(glob.glob(rpc + "/wheel/*.whl")[0]) as wheel:
    for name in ("google/rpc/status.proto", "google/rpc/error_details.proto"):
        wheel.extract(name, rpc + "/proto")
PY
  protoc -I "$rpc/proto" --java_out="$rpc/gen" \
    "$rpc/proto/google/rpc/status.proto" "$rpc/proto/google/rpc/error_details.proto"
  mapfile -t rpc_sources < <(find "$rpc/gen" -name '*.java' | sort)
  javac "${javac_flags[@]}" -nowarn -cp "$libs" -d "$rpc/classes" "${rpc_sources[@]}"
  touch "$rpc/done"
fi
libs="$rpc/classes:$libs"

# 2. The jar: exactly the pom's sources.
step "build $out/context-assembler-client-$version.jar"
rm -rf "$out/classes" "$out/test-classes"
mkdir -p "$out/classes" "$out/test-classes"
mapfile -t sources < <(find "$here/src/main/java" -name '*.java' | sort)
# Doclint on the helper only (the generated code documents what the proto documents).
javac "${javac_flags[@]}" -Xlint:all,-classfile -Xdoclint:all/protected -Xdoclint/package:dev.contextassembler.client \
  -cp "$libs" -d "$out/classes" "${sources[@]}" 2>"$out/javac.log" \
  || { cat "$out/javac.log" >&2; exit 1; }
if grep -q 'dev/contextassembler/client/' "$out/javac.log"; then
  echo "java: warnings in the helper:" >&2
  cat "$out/javac.log" >&2
  exit 1
fi
jar="$out/context-assembler-client-$version.jar"
rm -f "$jar"
jar --create --file "$jar" -C "$out/classes" .

# 3. The tests, against the live sidecars.
step "tests (JUnit 4) against $addr, $addr_no_memory (no memory) and $unix_addr"
mapfile -t test_sources < <(find "$here/src/test/java" -name '*.java' | sort)
javac "${javac_flags[@]}" -Xlint:all,-classfile -cp "$jar:$libs:$tests_libs" -d "$out/test-classes" \
  "${test_sources[@]}"
mapfile -t test_classes < <(cd "$out/test-classes" && find . -name '*Test.class' \
  | sed -e 's|^\./||' -e 's|\.class$||' -e 's|/|.|g' | sort)
status=0
CONTEXT_ASSEMBLER_ADDR="$addr" CONTEXT_ASSEMBLER_ADDR_NO_MEMORY="$addr_no_memory" \
  CONTEXT_ASSEMBLER_UNIX_ADDR="$unix_addr" CONTEXT_ASSEMBLER_REQUIRE_SERVER=1 \
  java "${jvm_flags[@]}" -cp "$out/test-classes:$jar:$libs:$tests_libs" \
  org.junit.runner.JUnitCore "${test_classes[@]}" >"$out/junit.log" 2>&1 || status=$?
cat "$out/junit.log"
# JUnitCore ends with "OK (N tests)" or "Tests run: N,  Failures: F".
summary="$(grep -E '^(OK \(|Tests run:)' "$out/junit.log" | tail -n 1 || true)"
if [[ "$summary" =~ ^OK\ \(([0-9]+)\ test ]]; then
  ran="${BASH_REMATCH[1]}" failures=0
elif [[ "$summary" =~ ^Tests\ run:\ ([0-9]+),\ +Failures:\ ([0-9]+) ]]; then
  ran="${BASH_REMATCH[1]}" failures="${BASH_REMATCH[2]}"
else
  echo "java: the test runner gave no summary" >&2
  exit 1
fi
# A failure of a test is listed as "N) method(class)"; one of a whole class ("N) class", its
# @BeforeClass) is not among the tests run.
test_failures="$(grep -cE '^[0-9]+\) .+\(.+\)$' "$out/junit.log" || true)"
step "done"
echo "java: $((ran - test_failures)) passed, $failures failed"
if ((status != 0 || failures != 0 || ran == 0)); then
  exit 1
fi
