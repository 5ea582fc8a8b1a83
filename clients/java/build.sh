#!/usr/bin/env bash
# Generates the Java stubs of the contract and compiles the client into OUT (default:
# target/clients/java under the repository root), with plain javac against Debian's jars in
# /usr/share/java (no Maven). Writes the launcher OUT/java-client. Needs the Debian packages
# listed in README.md.
# Usage: clients/java/build.sh [OUT]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/target/clients/java}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# One jar per library: Debian's netty-all.jar is an empty shell, so the netty parts are named.
jars=(
  grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
  protobuf proto-google-common-protos guava gson perfmark-api geronimo-annotation-1.3-spec
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common
  netty-handler netty-handler-proxy netty-resolver netty-transport
  netty-transport-native-unix-common
)
classpath=""
for jar in "${jars[@]}"; do
  path="/usr/share/java/$jar.jar"
  [[ -f "$path" ]] || { echo "missing $path (see clients/java/README.md)" >&2; exit 1; }
  classpath+="$path:"
done

rm -rf "$out/gen" "$out/classes"
mkdir -p "$out/gen" "$out/classes"
protoc -I "$root/proto" --plugin=protoc-gen-grpc-java=/usr/bin/grpc_java_plugin \
  --java_out="$out/gen" --grpc-java_out="$out/gen" \
  "$root/proto/context_assembler/v1/assembler.proto"
mapfile -t sources < <(find "$out/gen" "$root/clients/java/src" -name '*.java' | sort)
# C1 only: javac is a short run, so the optimising JIT costs more than it saves (about 2x here).
javac -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -nowarn -encoding UTF-8 --release 17 \
  -cp "$classpath" -d "$out/classes" "${sources[@]}"

classpath+="$out/classes"
# The launcher runs a short-lived process, so C1 alone starts it faster too.
cat > "$out/java-client" <<LAUNCHER
#!/bin/sh
exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp '$classpath' dev.contextassembler.client.Client "\$@"
LAUNCHER
chmod +x "$out/java-client"
echo "java client: $out/java-client"
