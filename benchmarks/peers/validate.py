"""Checks the peer runners on a made corpus with known duplicates (stdlib only; any Python runs it).

Corpus: 200 documents of 200 random words; 20 near copies (1 word in 100 replaced: word 5-gram Jaccard about
0.90, so each forms a duplicate pair with its original) and 20 far copies (30% of words replaced: Jaccard about
at most about 0.14, not duplicates). A runner passes when its removed ids are exactly one document of each near pair and
its clusters are exactly the 20 near pairs. Each runner runs in its own environment::

    python benchmarks/peers/validate.py [--datatrove-python P] [--textdedup-python P] [--corpus docs.jsonl]

With ``--corpus`` the runners run on that JSONL instead and only their summaries are printed (a timing run).
"""

from __future__ import annotations

import argparse
import json
import random
import string
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE.parent / ".peers"
RUNS = (
    ("datatrove", "datatrove_minhash.py", "spacy"),
    ("datatrove", "datatrove_minhash.py", "whitespace"),
    ("textdedup", "textdedup_minhash.py", "default"),
)


def make_corpus(seed: int = 7) -> tuple[list[dict], list[tuple[str, str]], list[tuple[str, str]]]:
    rng = random.Random(seed)
    vocab = sorted({"".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(6000)})
    base = [[rng.choice(vocab) for _ in range(200)] for _ in range(200)]
    docs = [{"id": f"base-{i:03d}", "text": " ".join(words)} for i, words in enumerate(base)]

    def edited(words: list[str], rate: float) -> str:
        words = list(words)
        for pos in rng.sample(range(len(words)), round(rate * len(words))):
            words[pos] = rng.choice([w for w in vocab[:50] if w != words[pos]])
        return " ".join(words)

    near = [(f"base-{i:03d}", f"near-{i:03d}") for i in range(20)]
    far = [(f"base-{i:03d}", f"far-{i:03d}") for i in range(20, 40)]
    docs += [{"id": copy, "text": edited(base[int(orig[5:])], 0.01)} for orig, copy in near]
    docs += [{"id": copy, "text": edited(base[int(orig[5:])], 0.30)} for orig, copy in far]
    return docs, near, far


def jaccard5(a: str, b: str) -> float:
    def grams(text: str) -> set[tuple[str, ...]]:
        words = text.split()
        return {tuple(words[i : i + 5]) for i in range(len(words) - 4)}

    ga, gb = grams(a), grams(b)
    return len(ga & gb) / len(ga | gb)


def check(result: dict, near: list[tuple[str, str]]) -> dict:
    removed, pairs = set(result["removed_ids"]), [set(p) for p in near]
    one_per_pair = all(len(removed & p) == 1 for p in pairs)
    in_pairs = removed <= set().union(*pairs)
    clusters = sorted(sorted(c) for c in result["clusters"])
    return {
        "removed": len(removed),
        "removed_exactly_one_per_near_pair": one_per_pair and in_pairs,
        "removed_equals_near_copies": removed == {c for _, c in near},
        "removed_outside_near_pairs": sorted(removed - set().union(*pairs)),
        "clusters_equal_near_pairs": clusters == sorted(sorted(p) for p in near),
        "pass": one_per_pair and in_pairs and len(removed) == len(near),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datatrove-python", default=str(PEERS / "datatrove/bin/python"))
    parser.add_argument("--textdedup-python", default=str(PEERS / "textdedup/bin/python"))
    parser.add_argument("--corpus", help="time the runners on this JSONL instead of validating")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", help="folder for the result JSONs (default: a temporary one)")
    args = parser.parse_args()
    pythons = {"datatrove": args.datatrove_python, "textdedup": args.textdedup_python}
    with tempfile.TemporaryDirectory(prefix="peers-validate-") as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        if args.corpus:
            corpus, near = Path(args.corpus), None
        else:
            docs, near, far = make_corpus()
            corpus = Path(tmp) / "made.jsonl"
            corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
            text = {d["id"]: d["text"] for d in docs}
            print(
                "made corpus:",
                len(docs),
                "docs; near-pair Jaccard min",
                round(min(jaccard5(text[a], text[b]) for a, b in near), 3),
                "far-pair Jaccard max",
                round(max(jaccard5(text[a], text[b]) for a, b in far), 3),
            )
        failed = False
        for env, script, variant in RUNS:
            python = pythons[env]
            if not Path(python).exists():
                print(f"{env}: skipped, no environment at {python}")
                continue
            result_path = out / f"{Path(script).stem}-{variant}.json"
            cmd = [
                python,
                str(HERE / script),
                "--input",
                str(corpus),
                "--workdir",
                str(Path(tmp) / "work"),
                "--output",
                str(result_path),
                "--workers",
                str(args.workers),
                "--variant",
                variant,
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{script} {variant}: FAILED (rc {proc.returncode})\n{proc.stderr[-3000:]}")
                failed = True
                continue
            result = json.loads(result_path.read_text())
            summary = {
                k: result[k]
                for k in (
                    "tool",
                    "variant",
                    "seconds",
                    "seconds_excluding_imports",
                    "docs_in",
                    "docs_per_second",
                    "peak_rss_mib",
                )
            }
            summary["removed"], summary["clusters"] = len(result["removed_ids"]), len(result["clusters"])
            if near is not None:
                summary["check"] = check(result, near)
                failed |= not summary["check"]["pass"]
            print(json.dumps(summary))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
