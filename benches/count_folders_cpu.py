"""Server CPU per MiB of CountTokens for each model folder, side by side in one run: the release sidecar
on loopback serving Qwen 3's, Llama 3.1's, Gemma 3's and DeepSeek V3's folders, and DeepSeek V3's
folder once more as `deepseek_v3_reference`, its third Split regex written with `\\r\\n` escapes in place
of the characters the file has (the same regex, another text, so not recognised: Hugging Face's
`tokenizers` counts it, as it counted every DeepSeek V3 text before its fast path). Each request is a
distinct 1 MiB text (no count-cache hit): prose of a 30,000-word Zipf lexicon with common words and
numbers, or Rust-like code. The server's CPU is read from /proc/PID/task/*/schedstat around each batch;
the figure is the median over rounds of each batch's CPU per MiB. DeepSeek V3's counts on both paths
must be equal, text by text.

Usage: python3 benches/count_folders_cpu.py BINARY VOCAB_DIR [TEXTS_PER_BATCH [ROUNDS]]
  (BINARY a release build; VOCAB_DIR what .ci/hf_vocab.sh fetched; defaults 10 texts, 3 rounds)
"""

import glob
import itertools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import grpc
from context_assembler.v1 import assembler_pb2 as pb, assembler_pb2_grpc as rpc

FAMILIES = ["qwen3", "llama3_1", "gemma3", "deepseek_v3"]
REFERENCE = "deepseek_v3_reference"
MIB = 1 << 20
COMMON = ("the of and to in is that it for was on are as with his they at be this from have or by one had not but "
          "what all were when we there can an your which their said if do will each about how up out them then she "
          "many some so these would other into has more her two like him see time could no make than first been its "
          "who now people my made over did down only way find use may water long little very after").split()


def write_config(vocab_dir, tmp):
    """The config, and DeepSeek V3's folder with its third regex respelled (see the module doc)."""
    tok = json.load(open(os.path.join(vocab_dir, "deepseek_v3", "tokenizer.json"), encoding="utf-8"))
    third = tok["pre_tokenizer"]["pretokenizers"][2]["pattern"]
    respelled = third["Regex"].replace("\r", "\\r").replace("\n", "\\n")
    if respelled == third["Regex"]:
        raise SystemExit("DeepSeek V3's third regex holds no carriage return or line feed to respell")
    third["Regex"] = respelled
    os.makedirs(os.path.join(tmp, REFERENCE))
    json.dump(tok, open(os.path.join(tmp, REFERENCE, "tokenizer.json"), "w", encoding="utf-8"))
    path = os.path.join(tmp, "config.toml")
    with open(path, "w", encoding="utf-8") as f:
        for name in FAMILIES + [REFERENCE]:
            folder = os.path.join(tmp, name) if name == REFERENCE else os.path.abspath(os.path.join(vocab_dir, name))
            f.write(f"[[models]]\nname = {json.dumps(name)}\ntokenizer_dir = {json.dumps(folder)}\n"
                    "context_window = 131072\noutput_reserve = 1024\n\n")
    return path


class Texts:
    """Distinct 1 MiB texts of prose or code."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        syllables = "ka lo mi ne ra tu sa vi po de an er in on th st ch ou ea re ti ng".split()
        self.lexicon = ["".join(self.rng.choice(syllables) for _ in range(self.rng.randrange(1, 5)))
                        for _ in range(30_000)]
        self.cumulative = list(itertools.accumulate(1 / (i + 1) for i in range(len(self.lexicon))))

    def words(self, k):
        return self.rng.choices(self.lexicon, cum_weights=self.cumulative, k=k)

    def prose(self):
        out, n = [], 0
        while n < MIB:
            ws = [self.rng.choice(COMMON) if self.rng.random() < 0.5 else w
                  for w in self.words(self.rng.randrange(6, 20))]
            if self.rng.random() < 0.2:
                ws.append(str(self.rng.randrange(100_000)))
            s = " ".join(ws).capitalize() + self.rng.choice([". ", ", ", "? ", ".\n\n", "; ", ": "])
            out.append(s)
            n += len(s)
        return "".join(out)[:MIB]

    def code(self):
        out, n = [], 0
        while n < MIB:
            name = "_".join(self.words(2))
            s = (f"fn {name}(x: u{self.rng.choice([8, 16, 32, 64])}) -> Result<(), Error> {{\n"
                 f"    let {self.words(1)[0]} = x + {self.rng.randrange(1000)};\n"
                 f"    if x > {self.rng.randrange(100)} {{ return Err(Error::new(\"{name}\")); }}\n    Ok(())\n}}\n\n")
            out.append(s)
            n += len(s)
        return "".join(out)[:MIB]


def main():
    if len(sys.argv) not in (3, 4, 5):
        raise SystemExit(__doc__)
    binary, vocab_dir = sys.argv[1], sys.argv[2]
    per_batch = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    texts = Texts(7)
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(vocab_dir, tmp)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            addr = f"127.0.0.1:{s.getsockname()[1]}"
        with open(os.path.join(tmp, "server.log"), "wb") as log:
            server = subprocess.Popen([binary, "serve", "--config", config, "--listen", addr, "--metrics-listen", "off",
                                       "--memory-store", "off"], stdout=log, stderr=subprocess.STDOUT)

        def cpu_seconds():
            return sum(int(open(f).read().split()[0]) for f in glob.glob(f"/proc/{server.pid}/task/*/schedstat")) / 1e9

        try:
            stub = rpc.AssemblerStub(grpc.insecure_channel(addr, options=[("grpc.max_send_message_length", 8 << 20)]))

            def count(model, text):
                return stub.CountTokens(pb.CountTokensRequest(model=model, text=text), timeout=120).tokens

            for _ in range(600):
                try:
                    count("qwen3", "hi")
                    break
                except grpc.RpcError:
                    time.sleep(0.1)
            per_mib = {}
            for r in range(rounds):
                for kind in ("prose", "code"):
                    batch = [getattr(texts, kind)() for _ in range(per_batch)]
                    for model in FAMILIES + [REFERENCE]:
                        before = cpu_seconds()
                        counts = [count(model, t) for t in batch]
                        per_mib.setdefault((model, kind), []).append(1000 * (cpu_seconds() - before) / per_batch)
                        if model == "deepseek_v3":
                            fast = counts
                        elif model == REFERENCE and counts != fast:
                            raise SystemExit(f"round {r} {kind}: DeepSeek V3's counts differ between the paths")
            print(f"server CPU per MiB of CountTokens, medians of {rounds} rounds of {per_batch} distinct 1 MiB texts")
            for kind in ("prose", "code"):
                for model in FAMILIES + [REFERENCE]:
                    xs = per_mib[(model, kind)]
                    print(f"  {kind:5} {model:22} {statistics.median(xs):7.1f} ms  (rounds: "
                          + ", ".join(f"{x:.1f}" for x in xs) + ")")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
