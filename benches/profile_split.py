#!/usr/bin/env python3
"""Splits a cold request's server samples into measuring and the allocator's own
work (docs/benchmarks/history.md section 17, issue 20's "allocator at most a
quarter of tokenize" target), from a perf profile with call graphs:

    perf record -F 499 --call-graph dwarf,32768 -p <sidecar pid> -o cold.data -- sleep 8
    # meanwhile: loadgen --prompt-tokens 4000 --cold --offer 4 --concurrency 4 --duration 9s
    perf script -i cold.data -F comm,ip,sym > cold.txt
    python3 benches/profile_split.py cold.txt

A sample is *counting* when a frame of its stack is in the tokenizer, the BPE
or the pre-tokenizer; *measuring* adds the count caches' lookups and the
word-scan lower bounds (what the tokenize phase held before lazy measuring);
the allocator's *own* work is a sample inside `allocate` that is neither.
"""
import sys


def stacks(path):
    """Each sample's frames (symbols), leaf first."""
    current = None
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                if current is not None:
                    yield current
                current = None
            elif not line[0].isspace() or current is None:
                if current is not None:
                    yield current
                current = []
            else:
                current.append(line.strip().split(" ", 1)[-1])
    if current:
        yield current


def main(path):
    def has(frames, part):
        return any(part in f for f in frames)

    def counting(frames):
        return any(has(frames, p) for p in ("tokens::tokenizer::", "bpe::", "tokens::pretok"))

    def measuring(frames):
        return counting(frames) or has(frames, "clock::Clock") or has(frames, "surely_over")

    total = counted = measured = own = own_outside_counting = summarizer = 0
    for frames in stacks(path):
        total += 1
        counted += counting(frames)
        measured += measuring(frames)
        if has(frames, "allocate::allocate"):
            own += not measuring(frames)
            own_outside_counting += not counting(frames)
            summarizer += has(frames, "compact::summary::") and not counting(frames)
    if not counted:
        sys.exit("no counting samples: was the profile taken with call graphs?")
    print(f"samples {total}, counting {counted}, measuring {measured}")
    print(f"allocator's own work {own}: {own / measured:.3f} of measuring")
    print(f"allocator's work outside counting {own_outside_counting}: {own_outside_counting / counted:.3f} of counting")
    print(f"the summarizer's own samples {summarizer}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
