#!/usr/bin/env python3
"""Generate the byte-level BPE tokenizer fixtures in tests/fixtures/tokenizer/.

CI never runs this script: its outputs are committed. A rerun reproduces every
file byte for byte (the corpus comes from a seeded generator, the `tokenizers`
BPE trainer is deterministic for a given input).

Files written:
  corpus.txt          ~20 KB of seeded text: arithmetic word problems, Python-like
                      code, prose with contractions, numbers and some non-ASCII.
  hf_bytelevel.json   trained by `tokenizers` on corpus.txt: GPT-2-style ByteLevel
                      pre-tokenizer (its built-in regex), ByteLevel decoder and
                      post-processor, special tokens <|endoftext|> and <|pad|>, plus
                      added tokens that exercise the matcher: "[MASK]" (special,
                      lstrip), "<tool>" (non-special, rstrip, normalized false),
                      "dragon" (non-special, single_word, normalized true). Merges
                      are rewritten as "a b" strings (the pre-0.20 spelling).
  hf_split.json       trained the same way with Sequence[Split(Llama-3 regex,
                      isolated), ByteLevel(use_regex=False)], special tokens
                      <|begin_of_text|>, <|end_of_text|>, <|eot_id|>, a
                      TemplateProcessing post-processor "<|begin_of_text|> $A", and
                      model.ignore_merges = true (as Llama 3). Merges as [a, b] pairs.
  cases.json          the test strings and, for every tokenizer above and for every
                      tokenizer.json that updraft's own trainer wrote here
                      (updraft_*.json), the ids that `tokenizers` gives with and
                      without special tokens, and decode() of those ids with and
                      without skip_special_tokens; decode() of id sequences that
                      cut UTF-8 characters apart or hold unknown ids; and the
                      Split pre-tokenization of every string for the GPT-2, Llama 3
                      and Qwen2 patterns. One variant is computed in memory, not
                      stored: "hf_bytelevel.json+prefix" is hf_bytelevel.json with
                      pre_tokenizer.add_prefix_space = true.

The updraft_*.json tokenizers are written by updraft's C++ trainer from corpus.txt
(see tests/trainer/bpe_train_test.cc). To (re)make everything:
  python3 -m venv /tmp/tokvenv && \\
  /tmp/tokvenv/bin/pip install -r tools/requirements-tokenizer-fixtures.txt && \\
  /tmp/tokvenv/bin/python tools/make_tokenizer_fixtures.py && \\
  UPDRAFT_WRITE_TOKENIZER_FIXTURES=1 build/tests/tokenizer_test --gtest_filter='BpeTrain.*Fixture*' && \\
  /tmp/tokvenv/bin/python tools/make_tokenizer_fixtures.py
The second run of the script records the HF encodings of the updraft_*.json
files (and checks that transformers' PreTrainedTokenizerFast loads them and
encodes as `tokenizers` does).
"""

import importlib.metadata
import json
import random
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT = REPO_ROOT / "tests" / "fixtures" / "tokenizer"
VOCAB_SIZE = 500

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

NAMES = ["Mia", "Leo", "Ava", "Noah", "Zoé", "Björn", "Ana", "Sam", "Kenji", "Olu"]
ITEMS = ["apples", "marbles", "books", "coins", "pencils", "stickers", "cookies", "cards"]
WORDS = ["value", "total", "items", "count", "result", "index", "left", "right", "data", "node"]
PROSE = [
    "I'm sure they'll come, but we don't know when. IT'S LATE, isn't it?",
    "The café in Zürich serves crème brûlée; naïve tourists pay 12,50 € for it.",
    "東京 and 大阪 are cities. Москва is too. 😀 Emoji: 👍🏽 and 🇯🇵!",
    "She said: \"you'd've liked it\" -- and left...   Then   spaces   ran   on.",
    "Line one\r\nLine two\r\n\tIndented with a tab.\n\n\nThree blank lines above.",
]


def corpus(rng):
    parts = []
    for i in range(90):
        kind = i % 3
        if kind == 0:
            name, item = rng.choice(NAMES), rng.choice(ITEMS)
            a, b, c = rng.randint(2, 99), rng.randint(1, 30), rng.randint(1, 50)
            parts.append(f"Question: {name} has {a} {item}. {name} gives away {b} and then buys {c} more. "
                         f"How many {item} does {name} have now?\nAnswer: {a} - {b} = {a - b}. "
                         f"{a - b} + {c} = {a - b + c}. The answer is {a - b + c}.\n")
        elif kind == 1:
            f, x, y = rng.choice(WORDS), rng.choice(WORDS), rng.choice(WORDS)
            n = rng.randint(0, 1000)
            parts.append(f"def {f}_{n}({x}, {y}):\n    # combine {x} and {y}\n    {f} = {x} * {n} + {y}\n"
                         f"    for i in range({rng.randint(1, 20)}):\n        {f} += i  # step\n"
                         f"    if {f} >= {n}:\n        return {f}\n    return -1\n\n")
        else:
            parts.append(rng.choice(PROSE) + "\n")
        parts.append("<|endoftext|>")
    return "".join(parts)


TEST_STRINGS = [
    "", " ", "  ", "\n", "\n\n", "   \n  \t", "\t\t", "\r\n", " \r\n ",
    "hello world", " hello", "Hello  world   ", "trailing spaces   ", "a\r\nb", "x\n\n\ny",
    "12345678901234567890", "3.14159", "x = 1234 + 56", "1,000,000", "٣٤٥ ١٢",
    "Hello, world! How's it going? I'm fine; you'd've...", "don't DON'T 'S 'Re 'll'", "'ſ and 'K",
    "<html>{}()[]</html>", "a==b!=c<=d", "...!!!???", "--> <-- ==>",
    "def f(x):\n    return x * 2\n", "for i in range(10):\n\tprint(i)\n",
    "Question: Mia has 23 apples.\nAnswer: 23 - 7 = 16. The answer is 16.\n",
    "café naïve résumé Zürich", "Здравствуй мир", "日本語のテキスト", "한국어 텍스트", "עברית", "مرحبا بالعالم",
    "e\u0301 combining", "\u00a0nbsp\u00a0 x", "ideographic\u3000space", "line\u2028sep", "nel\u0085x",
    "zero\u200bwidth", "Straße ﬁ ligature", "mongolian\u180evowel \u180e sep",
    "newer letters \U00010d4a\U0001e030 \u1c89x \U00031350\U0002ebf0", "newer digits \U00010d40\U0001ccf0 9",
    "😀👍🏽 family: 👨\u200d👩\u200d👧\u200d👦", "flags 🇺🇸🇯🇵", "\x00\x01\x7f control",
    "<|endoftext|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", " <|endoftext|> ", "<|endoftext",
    "<|begin_of_text|>hi<|eot_id|>", "x <|end_of_text|>\n",
    "a [MASK] b", "a   [MASK]", "<tool>   call", "dragon dragonfly a_dragon (dragon)", "dragon",
    "a" * 300, " " * 50 + "x", "9" * 40, "\n" * 10 + "end",
    "Mia's 42 cookies cost $3.50 -- she'll pay 147.00 total!",
]


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def train(pre_tokenizer, specials, text):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def save(tok, name, edit):
    data = json.loads(tok.to_str())
    edit(data)
    text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
    (OUT / name).write_text(text, encoding="utf-8")
    return text


def strings_merges(data):
    data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]


def make_hf_tokenizers(text):
    a = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), ["<|endoftext|>", "<|pad|>"], text)
    a.post_processor = processors.ByteLevel(trim_offsets=False)
    a.add_special_tokens([AddedToken("[MASK]", lstrip=True, special=True, normalized=False)])
    a.add_tokens([AddedToken("<tool>", rstrip=True, normalized=False),
                  AddedToken("dragon", single_word=True, normalized=True)])
    save(a, "hf_bytelevel.json", strings_merges)

    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    b = train(pre, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], text)
    bos = b.token_to_id("<|begin_of_text|>")
    b.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                     special_tokens=[("<|begin_of_text|>", bos)])

    def ignore_merges(data):
        data["model"]["ignore_merges"] = True

    save(b, "hf_split.json", ignore_merges)


def record(tok, cases_strings, rng):
    out = {"ids": [], "ids_special": [], "decoded": [], "decoded_skip": []}
    for s in cases_strings:
        ids = tok.encode(s, add_special_tokens=False).ids
        out["ids"].append(ids)
        out["ids_special"].append(tok.encode(s, add_special_tokens=True).ids)
        out["decoded"].append(tok.decode(ids, skip_special_tokens=False))
        out["decoded_skip"].append(tok.decode(ids, skip_special_tokens=True))
    # decode() of sequences that cut characters apart, hold stray bytes or unknown ids.
    byte_id = {b: tok.token_to_id(c) for c, b in byte_decoder().items()}
    cuts = [b"\xf0\x9f\x98", b"\xf0\x9f\x98x", b"\xe0\x80", b"\xc3", b"\xff\xfe", b"a\xed\xa0\x80b",
            b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xc3\xa9\xc3"]
    seqs = [[byte_id[b] for b in cut] for cut in cuts]
    seqs.append([byte_id[ord("a")], tok.get_vocab_size() + 7, byte_id[ord("b")]])
    vocab_size = tok.get_vocab_size()
    for _ in range(24):
        seqs.append([rng.randrange(vocab_size) for _ in range(rng.randint(1, 10))])
    out["decode_cases"] = [{"ids": q, "text": tok.decode(q, skip_special_tokens=False),
                            "text_skip": tok.decode(q, skip_special_tokens=True)} for q in seqs]
    return out


def pretokenize(pattern, cases_strings):
    dec = byte_decoder()
    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
    return [[p for p, _ in split.pre_tokenize_str(s)] for s in cases_strings]


def check_transformers(path, cases_strings):
    fast = PreTrainedTokenizerFast(tokenizer_file=str(path))
    tok = Tokenizer.from_file(str(path))
    for s in cases_strings:
        want = tok.encode(s, add_special_tokens=False).ids
        got = fast(s, add_special_tokens=False)["input_ids"]
        if got != want:
            sys.exit(f"{path.name}: PreTrainedTokenizerFast encodes {s!r} as {got}, tokenizers as {want}")


def dump_cases(cases):
    # One line per list of ids or pieces: small and diffable.
    lines = ["{"]
    top = list(cases.items())
    for i, (k, v) in enumerate(top):
        sep = "," if i + 1 < len(top) else ""
        if isinstance(v, dict) and k in ("tokenizers", "pretokenize"):
            lines.append(f" {json.dumps(k)}: {{")
            inner = list(v.items())
            for j, (name, rec) in enumerate(inner):
                lines.append(f"  {json.dumps(name)}: {{")
                fields = list(rec.items()) if isinstance(rec, dict) else [("pieces", rec)]
                for f, (fk, fv) in enumerate(fields):
                    body = ",\n".join("    " + json.dumps(x, ensure_ascii=False) for x in fv)
                    lines.append(f"   {json.dumps(fk)}: [\n{body}\n   ]" + ("," if f + 1 < len(fields) else ""))
                lines.append("  }" + ("," if j + 1 < len(inner) else ""))
            lines.append(" }" + sep)
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}{sep}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    text = corpus(random.Random(20240611))
    (OUT / "corpus.txt").write_text(text, encoding="utf-8", newline="")
    make_hf_tokenizers(text)

    rng = random.Random(7)
    records = {}
    names = ["hf_bytelevel.json", "hf_split.json"] + sorted(p.name for p in OUT.glob("updraft_*.json"))
    for name in names:
        path = OUT / name
        check_transformers(path, TEST_STRINGS)
        records[name] = record(Tokenizer.from_file(str(path)), TEST_STRINGS, rng)
        if name == "hf_bytelevel.json":
            data = json.loads(path.read_text(encoding="utf-8"))
            data["pre_tokenizer"]["add_prefix_space"] = True
            records[name + "+prefix"] = record(Tokenizer.from_str(json.dumps(data)), TEST_STRINGS, rng)
    if not any(n.startswith("updraft_") for n in names):
        print("note: no updraft_*.json yet; write them with the C++ test (see the docstring) and run again")

    cases = {
        "generator": "tools/make_tokenizer_fixtures.py",
        "versions": {p: importlib.metadata.version(p) for p in ("tokenizers", "transformers")},
        "strings": TEST_STRINGS,
        "patterns": {"gpt2": GPT2_PATTERN, "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN},
        "pretokenize": {k: pretokenize(p, TEST_STRINGS) for k, p in
                        (("gpt2", GPT2_PATTERN), ("llama3", LLAMA3_PATTERN), ("qwen2", QWEN2_PATTERN))},
        "tokenizers": records,
    }
    (OUT / "cases.json").write_text(dump_cases(cases), encoding="utf-8")
    json.loads((OUT / "cases.json").read_text(encoding="utf-8"))  # well-formed
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {OUT} ({total} bytes in all): {', '.join(sorted(p.name for p in OUT.iterdir()))}")


if __name__ == "__main__":
    main()
