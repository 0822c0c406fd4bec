"""Writes the ingest stage's documents (data/ingest/<source>/*.parquet) as the peers' JSONL input: {"id", "text"}
a line.

Run with the pipeline's environment (it needs pyarrow)::

    .venv/bin/python benchmarks/peers/export_ingest.py --out /tmp/ingest.jsonl [--limit N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ingest", default=str(REPO / "data" / "ingest"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--limit", type=int, default=0, help="at most this many documents (0: all)")
    args = parser.parse_args()
    paths = sorted(Path(args.ingest).rglob("*.parquet"))  # <source>.parquet or <source>/part-*.parquet
    if not paths:
        raise SystemExit(f"no *.parquet under {args.ingest} (run the ingest stage first)")
    n, seen = 0, set()
    with open(args.out, "w", encoding="utf-8") as f:
        for path in paths:
            table = pq.read_table(path, columns=["doc_id", "text"])
            for doc_id, text in zip(table["doc_id"].to_pylist(), table["text"].to_pylist()):
                if args.limit and n >= args.limit:
                    break
                if doc_id in seen:
                    raise SystemExit(f"duplicate doc_id {doc_id!r} in {path}")
                seen.add(doc_id)
                f.write(json.dumps({"id": str(doc_id), "text": text or ""}, ensure_ascii=False) + "\n")
                n += 1
    print(f"wrote {n} documents to {args.out}")


if __name__ == "__main__":
    main()
