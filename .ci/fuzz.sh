#!/usr/bin/env bash
# Fuzz smoke run: installs cargo-fuzz (pinned) if missing, builds the targets
# of fuzz/ and runs each for FUZZ_SECONDS (default 20) on the stable
# toolchain, from a corpus in fuzz/corpus/<target> that starts from the
# committed seeds in fuzz/seeds/<target> (the convert target's seeds are
# written from examples/ first). Exits non-zero if any target crashes,
# panics on a broken invariant or hangs (the input is saved in
# fuzz/artifacts/<target>/ and the log in fuzz/artifacts/logs/<target>.log),
# or ran fewer than FUZZ_MIN_RUNS inputs (default 100 per second of
# FUZZ_SECONDS; the targets run about 4,000 a second on a quiet 2-core
# machine): a target that hardly runs proves nothing.
#
#   bash .ci/fuzz.sh                         # 20 s per target
#   FUZZ_SECONDS=300 bash .ci/fuzz.sh        # a longer run
#   FUZZ_TARGETS="compact" bash .ci/fuzz.sh  # some targets only
#
# No sanitizer: ASan and LSan need nightly flags and clang's runtime, and
# the crate forbids unsafe code. Debug assertions and overflow checks stay
# on (cargo fuzz's default build is optimized with both; -O would drop them).
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
read -r -a TARGETS <<<"${FUZZ_TARGETS:-convert assemble compact memory memory_parse pretok deepseek gateway}"
# An input slower than this is reported as a hang (a failure).
PER_INPUT_TIMEOUT=30
FUZZ_MIN_RUNS="${FUZZ_MIN_RUNS:-$((FUZZ_SECONDS * 100))}"
export CARGO_TERM_COLOR=never

if ! [[ "$FUZZ_SECONDS" =~ ^[1-9][0-9]*$ ]]; then
    echo "FUZZ_SECONDS must be a positive number of seconds (0 would mean forever)" >&2
    exit 2
fi

if [[ "$(cargo fuzz --version 2>/dev/null || true)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

# cargo fuzz has no --locked: refuse a fuzz/Cargo.lock that would change.
if ! cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null; then
    echo "fuzz/Cargo.lock is stale (the main crate's dependencies changed?): run" \
        "'cargo update --workspace --manifest-path fuzz/Cargo.toml' and commit it" >&2
    exit 1
fi

BUILD=(--sanitizer none)
cargo fuzz build "${BUILD[@]}"

host="$(rustc -vV | sed -n 's/^host: //p')"
bin="fuzz/target/$host/release"
mkdir -p fuzz/artifacts/logs
if ! FUZZ_WRITE_SEEDS=fuzz/corpus/convert "$bin/convert" >fuzz/artifacts/logs/seeds.log 2>&1; then
    cat fuzz/artifacts/logs/seeds.log >&2
    exit 1
fi
failed=()
for t in "${TARGETS[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    if [[ -d "fuzz/seeds/$t" ]]; then
        cp -n fuzz/seeds/"$t"/* "fuzz/corpus/$t/"
    elif [[ "$t" != convert ]]; then
        echo "!! fuzz $t has no seeds in fuzz/seeds/$t" >&2
        failed+=("$t")
        continue
    fi
    log="fuzz/artifacts/logs/$t.log"
    echo "== fuzz $t for ${FUZZ_SECONDS}s (corpus: $(find "fuzz/corpus/$t" -type f | wc -l) inputs)"
    dict=()
    [[ -f "fuzz/$t.dict" ]] && dict=(-dict="fuzz/$t.dict")
    # The binary itself, not `cargo fuzz run`: nothing is rebuilt between targets.
    if "$bin/$t" "fuzz/corpus/$t" "${dict[@]}" -artifact_prefix="fuzz/artifacts/$t/" \
        -max_total_time="$FUZZ_SECONDS" -timeout="$PER_INPUT_TIMEOUT" -print_final_stats=1 >"$log" 2>&1; then
        grep -E '^#[0-9]+[[:space:]]+DONE|stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
        runs="$(sed -n 's/^stat::number_of_executed_units:[[:space:]]*//p' "$log" | tail -n 1)"
        if ! [[ "$runs" =~ ^[0-9]+$ ]] || ((runs < FUZZ_MIN_RUNS)); then
            echo "!! fuzz $t ran ${runs:-no} inputs in ${FUZZ_SECONDS}s, fewer than FUZZ_MIN_RUNS=$FUZZ_MIN_RUNS" >&2
            failed+=("$t")
        fi
    else
        echo "!! fuzz $t FAILED; end of $log:" >&2
        grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' "$log" | tail -n 40 >&2
        failed+=("$t")
    fi
done

if ((${#failed[@]})); then
    echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz: ${#TARGETS[@]} passed, 0 failed"
