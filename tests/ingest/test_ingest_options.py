"""Source options real corpora need: CoNLL group keys, record-separated text, BOMs and CRLF, missing labels,
include globs, symlinks, and params that may omit their optional keys."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from tasks import ingest
from tasks.common.files.shards import read_named
from tasks.config import Paths
from tasks.config.corpus.ingest import IngestParams
from tasks.ingest.records import SourceError, match_files
from tasks.tracking import NullLog

BOM = "\ufeff"


def run_ingest(tmp: Path, *sources: dict) -> dict:
    paths = Paths(data=tmp / "data", models=tmp / "models", metrics=tmp / "metrics", reports=tmp / "reports")
    return ingest.run(IngestParams(sources=list(sources)), paths, NullLog())


def rows_of(tmp: Path, source: str) -> list[dict]:
    return read_named(tmp / "data" / "ingest", source).to_pylist()


def dropped_of(tmp: Path) -> list[dict]:
    lines = (tmp / "data" / "ingest" / "dropped.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


# ---------------------------------------------------------------- CoNLL groups


CONLL_WITH_DOC_COMMENTS = """\
# doc = wsj-01
# sent_id = s1
# newdoc id = not-the-group
Ann\tB-PER
ran\tO

# a comment without a key
# tokens: 1
Bo\tB-PER

# doc = wsj-02
Cy\tO
"""


def test_conll_group_from_a_custom_comment_key_and_comments_are_never_tokens(tmp_path):
    path = write(tmp_path / "in" / "news.conll", CONLL_WITH_DOC_COMMENTS)
    spec = {"name": "ner", "kind": "conll", "role": "task", "path": str(path), "tag_column": 1, "group_comment": "doc"}
    metrics = run_ingest(tmp_path, spec)
    rows = rows_of(tmp_path, "ner")
    assert [(r["doc_id"], r["group"], r["tokens"]) for r in rows] == [
        ("ner:s1", "wsj-01", ["Ann", "ran"]),
        ("ner:news.conll:000002", "wsj-01", ["Bo"]),  # no doc comment: still in wsj-01
        ("ner:news.conll:000003", "wsj-02", ["Cy"]),
    ]
    assert json.loads(rows[0]["meta"]) == {"doc": "wsj-01", "newdoc id": "not-the-group", "sent_id": "s1"}
    assert json.loads(rows[1]["meta"]) == {"comments": ["a comment without a key", "tokens: 1"]}
    assert metrics["sources"]["ner"]["tokens_out"] == 4  # the 6 comment lines gave no token


def test_conll_without_a_group_key_makes_each_sentence_its_own_group(tmp_path):
    path = write(tmp_path / "in" / "news.conll", CONLL_WITH_DOC_COMMENTS)
    spec = {"name": "ner", "kind": "conll", "role": "task", "path": str(path), "tag_column": 1, "group_comment": None}
    run_ingest(tmp_path, spec)
    assert [r["group"] for r in rows_of(tmp_path, "ner")] == [
        "ner:s1",
        "ner:news.conll:000002",
        "ner:news.conll:000003",
    ]


def test_conll_group_from_a_column_and_a_sentence_that_disagrees(tmp_path):
    path = write(tmp_path / "in" / "col.conll", "# newdoc id = ignored\nAnn d1 B-PER\nran d1 O\n\nBo d2 B-PER\n")
    spec = {
        "name": "ner",
        "kind": "conll",
        "role": "task",
        "path": str(path),
        "token_column": 0,
        "tag_column": 2,
        "group_column": 1,
        "separator": "whitespace",
    }
    run_ingest(tmp_path, spec)
    assert [(r["tokens"], r["tags"], r["group"]) for r in rows_of(tmp_path, "ner")] == [
        (["Ann", "ran"], ["B-PER", "O"], "d1"),
        (["Bo"], ["B-PER"], "d2"),
    ]
    write(path, "Ann d1 B-PER\nran d1 O\nfast d9 O\n")
    with pytest.raises(SourceError) as err:
        run_ingest(tmp_path, spec)
    assert str(err.value) == (
        f"{path}:3: group column value 'd9' differs from 'd1' of the sentence's first token at {path}:1"
    )


def test_conll_group_params_are_checked():
    base = {"name": "ner", "kind": "conll", "role": "task", "path": "x.conll", "tag_column": 1}
    with pytest.raises(ValidationError, match="at most one of group_comment and group_column"):
        IngestParams.model_validate({"sources": [base | {"group_column": 2, "group_comment": "doc"}]})
    with pytest.raises(ValidationError, match="token_column, tag_column and group_column must differ"):
        IngestParams.model_validate({"sources": [base | {"group_column": 1}]})
    only_column = IngestParams.model_validate({"sources": [base | {"group_column": 2}]}).sources[0]
    assert (only_column.group_column, only_column.group_comment) == (2, None)


# ---------------------------------------------------------------- text records, BOM, CRLF

FORTUNES = "A fool and his money\n  are soon parted.\n%\n\nQ: Why?\n\nA: Because.\n %\t\n%\nlast one\n%\n"


def test_text_records_split_at_a_separator_line(tmp_path):
    path = write(tmp_path / "in" / "fortunes", FORTUNES)
    spec = {
        "name": "quotes",
        "kind": "text",
        "role": "pretrain",
        "path": str(path),
        "unit": "record",
        "record_separator": "%",
    }
    metrics = run_ingest(tmp_path, spec)
    assert [(r["doc_id"], r["text"]) for r in rows_of(tmp_path, "quotes")] == [
        ("quotes:fortunes:1", "A fool and his money\nare soon parted."),
        ("quotes:fortunes:5", "Q: Why?\n\nA: Because."),  # a blank line inside a record stays
        ("quotes:fortunes:10", "last one"),
    ]
    # the empty record between ' %\t' and '%' and the one after the final '%' hold no text: no documents
    assert metrics["sources"]["quotes"]["docs_in"] == 3


def test_text_record_params_are_checked():
    base = {"name": "q", "kind": "text", "role": "pretrain", "path": "f"}
    with pytest.raises(ValidationError, match="record_separator goes with unit: record"):
        IngestParams.model_validate({"sources": [base | {"unit": "record"}]})
    with pytest.raises(ValidationError, match="record_separator goes with unit: record"):
        IngestParams.model_validate({"sources": [base | {"record_separator": "%"}]})
    with pytest.raises(ValidationError, match="cannot start or end with whitespace"):
        IngestParams.model_validate({"sources": [base | {"unit": "record", "record_separator": "% "}]})


def test_bom_and_crlf_in_csv_jsonl_and_text(tmp_path):
    csv_path = write(tmp_path / "in" / "a.csv", BOM + 'text,label\r\n"one\r\ntwo",pos\r\nthree,neg\r\n')
    jsonl_path = write(tmp_path / "in" / "b.jsonl", BOM + '{"text": "four"}\r\n{"text": "five"}\r\n')
    text_path = write(tmp_path / "in" / "c.txt", BOM + "six\r\n%\r\nseven\r\n")
    run_ingest(
        tmp_path,
        {
            "name": "c",
            "kind": "csv",
            "role": "task",
            "path": str(csv_path),
            "text_field": "text",
            "label_field": "label",
        },
        {"name": "j", "kind": "jsonl", "role": "pretrain", "path": str(jsonl_path), "text_field": "text"},
        {
            "name": "t",
            "kind": "text",
            "role": "pretrain",
            "path": str(text_path),
            "unit": "record",
            "record_separator": "%",
        },
    )
    assert [(r["doc_id"], r["text"], r["label"]) for r in rows_of(tmp_path, "c")] == [
        ("c:a.csv:2", "one\ntwo", "pos"),
        ("c:a.csv:4", "three", "neg"),
    ]
    assert [(r["doc_id"], r["text"]) for r in rows_of(tmp_path, "j")] == [
        ("j:b.jsonl:1", "four"),
        ("j:b.jsonl:2", "five"),
    ]
    assert [(r["doc_id"], r["text"]) for r in rows_of(tmp_path, "t")] == [("t:c.txt:1", "six"), ("t:c.txt:3", "seven")]
    metas = [json.loads(r["meta"]) for name in "cjt" for r in rows_of(tmp_path, name)]
    assert all("raw_text" not in meta for meta in metas)  # the BOM went before normalization: nothing changed


# ---------------------------------------------------------------- missing labels

CSV_GAPS = "text,label\nkept,pos\nempty cell,\nblank cell,  \nnan string,nan\nNaN string,NaN\nnan word,nana\n"


def csv_spec(path: Path, **extra) -> dict:
    return {
        "name": "c",
        "kind": "csv",
        "role": "task",
        "path": str(path),
        "text_field": "text",
        "label_field": "label",
    } | extra


def test_missing_labels_in_csv_are_dropped_with_a_reason(tmp_path):
    path = write(tmp_path / "in" / "gaps.csv", CSV_GAPS)
    metrics = run_ingest(tmp_path, csv_spec(path, missing_label="drop"))
    m = metrics["sources"]["c"]
    assert (m["docs_in"], m["docs_out"], m["dropped"], m["labels"]) == (
        6,
        2,
        {"missing_label": 4},
        {"nana": 1, "pos": 1},
    )
    assert [(d["doc_id"], d["reason"], d["where"], d["detail"]) for d in dropped_of(tmp_path)] == [
        ("c:gaps.csv:3", "missing_label", f"{path}:3", "label field 'label' is ''"),
        ("c:gaps.csv:4", "missing_label", f"{path}:4", "label field 'label' is '  '"),
        ("c:gaps.csv:5", "missing_label", f"{path}:5", "label field 'label' is 'nan'"),
        ("c:gaps.csv:6", "missing_label", f"{path}:6", "label field 'label' is 'NaN'"),
    ]


def test_a_missing_label_is_an_error_by_default_naming_file_and_line(tmp_path):
    path = write(tmp_path / "in" / "gaps.csv", CSV_GAPS)
    with pytest.raises(SourceError) as err:
        run_ingest(tmp_path, csv_spec(path))
    assert str(err.value) == (
        f"{path}:3: label field 'label' is '': a missing label (set missing_label: drop to drop such records)"
    )


def test_missing_labels_in_jsonl_and_parquet(tmp_path):
    jsonl = write(
        tmp_path / "in" / "gaps.jsonl",
        '{"text": "a", "y": "pos"}\n{"text": "b", "y": null}\n'
        '{"text": "c", "y": ""}\n{"text": "d", "y": NaN}\n{"text": "e"}\n',
    )
    parquet = tmp_path / "in" / "gaps.parquet"
    pq.write_table(pa.table({"text": ["g", "h", "i"], "y": pa.array([1.0, None, math.nan])}), parquet)
    spec = {"role": "task", "text_field": "text", "label_field": "y", "missing_label": "drop"}
    metrics = run_ingest(
        tmp_path,
        spec | {"name": "j", "kind": "jsonl", "path": str(jsonl)},
        spec | {"name": "p", "kind": "parquet", "path": str(parquet)},
    )
    assert [r["label"] for r in rows_of(tmp_path, "j")] == ["pos"]
    assert [r["label"] for r in rows_of(tmp_path, "p")] == ["1"]  # pandas' int column with gaps is float
    assert metrics["sources"]["j"]["dropped"] == {"missing_label": 4}
    assert metrics["sources"]["p"]["dropped"] == {"missing_label": 2}
    details = [(d["where"], d["detail"]) for d in dropped_of(tmp_path)]
    assert details == [
        (f"{jsonl}:2", "label field 'y' is None"),
        (f"{jsonl}:3", "label field 'y' is ''"),
        (f"{jsonl}:4", "label field 'y' is nan"),
        (f"{jsonl}:5", "no label field 'y'"),
        (f"{parquet}:row 1", "label field 'y' is None"),
        (f"{parquet}:row 2", "label field 'y' is nan"),
    ]
    with pytest.raises(SourceError) as err:
        run_ingest(tmp_path, spec | {"name": "p", "kind": "parquet", "path": str(parquet), "missing_label": "error"})
    assert str(err.value) == (
        f"{parquet}:row 1: label field 'y' is None: a missing label (set missing_label: drop to drop such records)"
    )


# ---------------------------------------------------------------- include globs and symlinks


def test_a_folder_reads_only_files_matching_include(tmp_path):
    root = tmp_path / "corpus"
    for name in ("a.txt", "notes.md", "sub/c.txt", ".hidden.txt"):
        write(root / name, f"text of {name}")
    spec = {"name": "t", "kind": "text", "role": "pretrain", "path": str(root), "include": "*.txt"}
    metrics = run_ingest(tmp_path, spec)
    assert [r["doc_id"] for r in rows_of(tmp_path, "t")] == ["t:a.txt", "t:sub/c.txt"]
    assert metrics["sources"]["t"]["paths_skipped"] == {"not_included": 1}
    run_ingest(tmp_path, spec | {"include": "sub/*.txt"})
    assert [r["doc_id"] for r in rows_of(tmp_path, "t")] == ["t:sub/c.txt"]
    with pytest.raises(SourceError, match=rf"^{root}: no file matches \(include '\*.csv'\)$"):
        run_ingest(tmp_path, spec | {"include": "*.csv"})


def test_a_parquet_folder_skips_spark_marker_files_by_default(tmp_path):
    shards = tmp_path / "spark_out"
    shards.mkdir()
    pq.write_table(pa.table({"text": ["alpha"]}), shards / "part-00000.parquet")
    (shards / "_SUCCESS").write_bytes(b"")
    metrics = run_ingest(
        tmp_path, {"name": "p", "kind": "parquet", "role": "pretrain", "path": str(shards), "text_field": "text"}
    )
    assert [r["text"] for r in rows_of(tmp_path, "p")] == ["alpha"]
    assert metrics["sources"]["p"]["paths_skipped"] == {"not_included": 1}


def test_symlink_loops_and_duplicate_links_read_each_file_once(tmp_path):
    root = tmp_path / "corpus"
    write(root / "real" / "a.txt", "alpha")
    write(root / "real" / "b.txt", "beta")
    (root / "real" / "loop").symlink_to(root)  # a loop: real/loop/real/loop/...
    (root / "alias").symlink_to(root / "real")  # a second path to one folder
    (root / "0-link.txt").symlink_to(root / "real" / "a.txt")  # sorts first, but is only a link
    (root / "gone.txt").symlink_to(root / "nowhere.txt")
    spec = {"name": "t", "kind": "text", "role": "pretrain", "path": str(root)}
    metrics = run_ingest(tmp_path, spec)
    assert [(r["doc_id"], r["text"]) for r in rows_of(tmp_path, "t")] == [
        ("t:real/a.txt", "alpha"),
        ("t:real/b.txt", "beta"),
    ]
    assert metrics["sources"]["t"]["paths_skipped"] == {"broken_link": 1, "repeated_file": 1, "repeated_folder": 2}
    found = match_files(str(root / "**" / "*.txt"))
    assert [name for _, name in found.files] == ["real/a.txt", "real/b.txt"]
    assert sorted(found.skipped) == sorted(
        [
            (str(root / "0-link.txt"), "repeated_file"),
            (str(root / "gone.txt"), "broken_link"),
            (str(root / "alias"), "repeated_folder"),
            (str(root / "real" / "loop"), "repeated_folder"),
        ]
    )


def test_a_hard_link_is_the_same_file(tmp_path):
    write(tmp_path / "in" / "a.txt", "alpha")
    os.link(tmp_path / "in" / "a.txt", tmp_path / "in" / "b.txt")
    found = match_files(str(tmp_path / "in"))
    assert [name for _, name in found.files] == ["a.txt"]
    assert found.skipped == [(str(tmp_path / "in" / "b.txt"), "repeated_file")]


# ---------------------------------------------------------------- optional keys


def test_sources_may_omit_their_optional_keys():
    minimal = [
        {"name": "b", "kind": "builtin", "corpus": "wnut16", "role": "task"},
        {"name": "j", "kind": "jsonl", "role": "pretrain", "path": "x.jsonl", "text_field": "body"},
        {"name": "c", "kind": "csv", "role": "task", "path": "x.csv", "text_field": "body", "label_field": "y"},
        {"name": "p", "kind": "parquet", "role": "pretrain", "path": "x", "text_field": "body"},
        {"name": "h", "kind": "hf_disk", "role": "task", "path": "x", "tokens_field": "w", "tags_field": "t"},
        {"name": "t", "kind": "text", "role": "pretrain", "path": "x"},
        {"name": "n", "kind": "conll", "role": "task", "path": "x", "tag_column": 3},
    ]
    b, j, c, p, h, t, n = IngestParams.model_validate({"sources": minimal}).sources
    assert b.max_docs is None
    assert (j.label_field, j.group_field, j.id_field, j.tokens_field, j.include, j.missing_label) == (
        None,
        None,
        None,
        None,
        "*",
        "error",
    )
    assert (c.label_field, c.id_field, p.include, h.text_field) == ("y", None, "*.parquet", None)
    assert (t.unit, t.record_separator, t.label_from_parent_dir, t.include) == ("file", None, False, "*")
    assert (n.token_column, n.tag_column, n.separator, n.group_comment, n.group_column) == (
        0,
        3,
        "tab",
        "newdoc id",
        None,
    )


def test_required_keys_stay_required():
    def error(source: dict) -> str:
        with pytest.raises(ValidationError) as err:
            IngestParams.model_validate({"sources": [source]})
        return str(err.value)

    assert "sources.0.csv.text_field\n  Field required" in error(
        {"name": "c", "kind": "csv", "role": "task", "path": "x.csv"}
    )
    assert "sources.0.jsonl.path\n  Field required" in error(
        {"name": "j", "kind": "jsonl", "role": "task", "text_field": "t"}
    )
    assert "sources.0.conll.tag_column\n  Field required" in error(
        {"name": "n", "kind": "conll", "role": "task", "path": "x"}
    )
    assert "exactly one of text_field and tokens_field" in error(
        {"name": "j", "kind": "jsonl", "role": "task", "path": "x"}
    )
    assert "sources.0.hf_disk.include" in error(
        {"name": "h", "kind": "hf_disk", "role": "task", "path": "x", "text_field": "t", "include": "*"}
    )


def test_a_class_label_of_minus_one_is_a_missing_label(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {"sentence": datasets.Value("string"), "stars": datasets.ClassLabel(names=["bad", "good"])}
    )
    rows = {"sentence": ["great", "unlabelled", "dull"], "stars": [1, -1, 0]}  # -1: datasets' "no label"
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(tmp_path / "hf")
    metrics = run_ingest(
        tmp_path,
        {
            "name": "h",
            "kind": "hf_disk",
            "role": "task",
            "path": str(tmp_path / "hf"),
            "text_field": "sentence",
            "label_field": "stars",
            "missing_label": "drop",
        },
    )
    assert [(r["text"], r["label"]) for r in rows_of(tmp_path, "h")] == [("great", "good"), ("dull", "bad")]
    assert metrics["sources"]["h"]["dropped"] == {"missing_label": 1}
    assert [(d["where"], d["detail"]) for d in dropped_of(tmp_path)] == [
        (f"{tmp_path / 'hf'}[all] row 1", "label field 'stars' is None")
    ]
