"""Recount of answers a running sidecar gave, with OpenAI's tiktoken.

Reads files of sampled answers (one JSON object per line, as written by
`loadgen --answers FILE`: rpc, requestId, tokenizer, totalTokens, budget and
the messages' roles and contents) and recounts each prompt from scratch under
the chat formula of tests/reference/tiktoken_check.py, with the encodings
built there from OpenAI's own vocabulary files. Fails when a recount differs
from the reported total, a total exceeds its budget, a tokenizer is not one
of OpenAI's exact encodings, or a file holds fewer than MIN answers.

Usage: python3 tests/reference/answers_check.py MIN FILE...
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiktoken_check import ROLES, openai_encodings  # noqa: E402


def recount(enc, messages):
    return 3 + sum(
        3 + len(enc.encode_ordinary(ROLES[m["role"]])) + len(enc.encode_ordinary(m["content"]))
        for m in messages
    )


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    least = int(sys.argv[1])
    encodings = openai_encodings()
    failed = 0
    for path in sys.argv[2:]:
        with open(path, encoding="utf-8") as f:
            answers = [json.loads(line) for line in f if line.strip()]
        bad = 0
        for a in answers:
            where = f"{path}: {a['rpc']} {a['requestId']}"
            enc = encodings.get(a["tokenizer"])
            if enc is None:
                print(f"{where}: tokenizer {a['tokenizer']} is not an exact OpenAI encoding")
                bad += 1
                continue
            total = recount(enc, a["messages"])
            if total != a["totalTokens"] or total > a["budget"]:
                print(f"{where}: usage {a['totalTokens']}, tiktoken recount {total}, budget {a['budget']}")
                bad += 1
        if len(answers) < least:
            print(f"{path}: {len(answers)} answers sampled, fewer than {least}")
            bad += 1
        print(f"reference: {path}: {len(answers) - bad} of {len(answers)} answers recount equal, within budget")
        failed += bad
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
