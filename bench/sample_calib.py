#!/usr/bin/env python3
"""Bench helper (not a test): calibration text sampled from a model behind `tq serve`.

Each completion starts from token 0 (SmolLM2's <|endoftext|>, a document start) and is sampled
at temperature 1 with its own seed; the texts go to OUT as JSONL with a "text" field, which
`tq distill --calib OUT` reads.
Usage: bench/sample_calib.py PORT COUNT OUT MODEL_NAME
"""
import concurrent.futures as cf
import json
import sys

from openai import OpenAI


def main():
    port, count, out, model = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")

    def one(i):
        r = client.completions.create(model=model, prompt=[0], max_tokens=560, temperature=1.0,
                                      seed=1000 + i)
        return r.choices[0].text

    with cf.ThreadPoolExecutor(8) as ex, open(out, "w") as f:
        for i, text in enumerate(ex.map(one, range(count))):
            f.write(json.dumps({"text": text}) + "\n")
            print(f"{i + 1}/{count}: {len(text)} characters", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
