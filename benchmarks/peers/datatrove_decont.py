"""datatrove 0.10.1 n-gram decontamination on a benchmark corpus; run with the datatrove peer environment's python.

Never imported by the pipeline or by ``benchmarks/leakage.py``: that script runs it in its own process, as
``benchmarks/.peers/datatrove/bin/python benchmarks/peers/datatrove_decont.py --corpus C.json --out R.json
--tokenizer spacy|split|words``. ``C.json`` is ``{"train": [text, ...], "eval": [text, ...]}``.

What runs, all datatrove's own code (``datatrove.pipeline.decont``):

- ``NGramsDecontIndexer.compute_hashes`` on every eval text (``simplify_text`` with the configured
  ``TextNormConfig``, its word tokenizer, every 13-gram joined by spaces and hashed with xxhash64), saved as
  its ``<task>.index.hashes`` file. The indexer's ``run`` is replaced by the part of it that reads input
  documents (``text`` = the eval text, ``metadata["query"] = None``: no prompt, so no query or overlap
  n-grams); its other part loads lighteval tasks, which we do not use (lighteval is not installed), and
  ``PipelineStep.__new__``'s check that lighteval is importable is skipped for the same reason.
- ``NGramsDecontFilter.run`` over the training docs (loads the index, then per doc: normalize, tokenize,
  stop at the first 13-gram found in the index). A dropped doc is a flagged doc.

Settings: ``NGramsDecontConfig(n_grams=13, find_query_ngrams=False, find_overlap_ngrams=False)``,
``HashConfig()`` (xxhash, 64 bits), ``TextNormConfig(lowercase=True, norm_unicode_diacritics=False,
norm_numbers=False, norm_weekdays=False, norm_monthnames=False)``: numbers and diacritics are kept because
``tasks.common.matching.textnorm`` keeps them. Tokenizers (``benchmarks/peers/_datatrove_words.py``):

- ``words``: what a user who wants our words writes: a ``WordTokenizer`` subclass (datatrove's documented hook
  for custom tokenizers) returning the ``\\w+`` runs, with ``remove_punctuation=False, norm_whitespace=False``
  (the pattern does both jobs). The closest to ours, and the fastest.
- ``split``: ``remove_punctuation=True, norm_whitespace=True`` (the defaults) and a ``WordTokenizer`` subclass
  splitting the simplified text on whitespace, where ``simplify_text`` turned its punctuation list into spaces.
- ``spacy``: the defaults and its English default (``load_word_tokenizer("en")``: a blank spaCy English pipeline
  with a sentencizer).

Writes ``{flagged, ngram, seconds, import_seconds, cpu_seconds, peak_rss_mb, rss_after_load_mb, settings}`` to
``--out``. The decont module imports ``regex`` (not a dependency of datatrove's base install), so the
environment needs it too.

Differences from ours that remain: ``str.lower`` (ours: NFKC, casefold, Unicode format characters removed);
for ``split`` and ``spacy``, a fixed punctuation list turned into spaces (ours: ``\\w+`` runs, so "_" is a word
character to us and punctuation to it, and a symbol outside its list, such as "£", stays in its text); no
n-grams for an eval text under 13 words (ours: its whole length as n, from 5 words); the first hit per doc, not
every pair.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

START = time.perf_counter()

import numpy as np  # noqa: E402
from _datatrove_words import SplitTokenizer, WordsTokenizer  # noqa: E402
from datatrove.data import Document  # noqa: E402
from datatrove.pipeline.decont import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer  # noqa: E402
from datatrove.utils.text import TextNormConfig  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - START


class DocumentsIndexer(NGramsDecontIndexer):
    """``NGramsDecontIndexer`` fed input documents only (no lighteval tasks)."""

    def __new__(cls, *args, **kwargs):  # PipelineStep.__new__ would require lighteval, used only for its tasks
        return object.__new__(cls)

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        hashes = set()
        for doc in data:
            hashes.update(self.compute_hashes(doc.text, doc.metadata.get("query")))
        array = np.array(sorted(hashes), dtype=self.config.hash_config.np_descr)
        with self.output_folder.open("eval.index.hashes", mode="wb") as f:
            array.tofile(f)
        return len(array)


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident set (``VmRSS``) or its peak (``VmHWM``), MiB. The peak is read here, not from
    ``ru_maxrss``, which Linux carries over from the parent through fork and exec."""
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def norm_config(tokenizer: str) -> TextNormConfig:
    """Numbers and diacritics kept (as ours); for ``words`` punctuation and whitespace left to its ``\\w+``."""
    raw = {"remove_punctuation": False, "norm_whitespace": False} if tokenizer == "words" else {}
    return TextNormConfig(norm_numbers=False, norm_unicode_diacritics=False, **raw)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokenizer", choices=("spacy", "split", "words"), default="spacy")
    parser.add_argument("--ngram", type=int, default=13)
    args = parser.parse_args()
    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)
    loaded = rss_mb()
    norm = norm_config(args.tokenizer)
    config = NGramsDecontConfig(
        n_grams=args.ngram, find_query_ngrams=False, find_overlap_ngrams=False, norm_config=norm
    )
    language = {"spacy": "en", "split": SplitTokenizer(), "words": WordsTokenizer()}[args.tokenizer]
    with tempfile.TemporaryDirectory(prefix="dt-decont-") as index_dir:
        start, cpu_start = time.perf_counter(), time.process_time()
        docs = [Document(text=t, id=str(j), metadata={"query": None}) for j, t in enumerate(corpus["eval"])]
        n_hashes = DocumentsIndexer(index_dir, config=config, language=language).run(docs)
        indexed, cpu_indexed = time.perf_counter(), time.process_time()
        step = NGramsDecontFilter(index_dir, config=config, language=language)
        train = [Document(text=t, id=str(i)) for i, t in enumerate(corpus["train"])]
        kept = {int(doc.id) for doc in step.run(iter(train))}
        done, cpu_done = time.perf_counter(), time.process_time()
    flagged = [i for i in range(len(train)) if i not in kept]
    result = {
        "flagged": flagged,
        "ngram": {str(i): train[i].metadata.get("contaminated_ngram") for i in flagged},
        "seconds": {"index": indexed - start, "filter": done - indexed, "total": done - start},
        "cpu_seconds": {
            "index": cpu_indexed - cpu_start,
            "filter": cpu_done - cpu_indexed,
            "total": cpu_done - cpu_start,
        },
        "index_hashes": n_hashes,
        "import_seconds": IMPORT_SECONDS,
        "peak_rss_mb": rss_mb("VmHWM"),
        "rss_after_load_mb": loaded,
        "settings": {
            "tokenizer": args.tokenizer,
            "n_grams": args.ngram,
            "norm_config": vars(norm),
            "hash_config": str(config.hash_config),
            "find_query_ngrams": False,
            "find_overlap_ngrams": False,
        },
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
