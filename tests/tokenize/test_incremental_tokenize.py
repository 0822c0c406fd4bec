"""Incremental tokenize (issue 35 items 1-2): a run after new pretraining docs arrive encodes only their texts,
a removed doc leaves the outputs, a changed tokenizer re-encodes everything, and every output equals a
from-scratch run's byte for byte.

Each test keeps two roots: ``inc`` is run before and after the change (the second run is the incremental one),
``full`` only after it, from scratch (no ``tokenize_cache``). Both read the same tokenizer files (copied), so
the only difference is the cache.
"""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks import tokenize as stage
from tasks.tokenize import cache
from tasks.tracking import NullLog
from tokenize_fixtures import news_rows, pretrain, tokenize_params, train_tokenizer, tweet_rows, write_inputs


class RecordingLog(NullLog):
    """A NullLog that keeps the tags and metrics a run sends to MLflow (nested metric dicts merged)."""

    def __init__(self) -> None:
        self.logged: dict = {"incremental": {}}

    def metrics(self, values, step=None) -> None:
        for name, counts in values.get("incremental", {}).items():
            self.logged["incremental"].setdefault(name, {}).update(counts)

    def tags(self, values) -> None:
        self.logged.update(values)


def run(paths, **changes) -> dict:
    """One tokenize run; returns what it sent to MLflow."""
    log = RecordingLog()
    stage.run(tokenize_params(**changes), paths, log)
    return log.logged


def outputs(paths) -> dict:
    root = paths.data / "tokenize"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def from_scratch(tmp_path, rows: list[dict], inc) -> dict:
    """Outputs of a run over ``rows`` with ``inc``'s tokenizer and no cache."""
    full = write_inputs(tmp_path / "full", rows)
    shutil.copytree(inc.models / "tokenizer", full.models / "tokenizer")
    logged = run(full)
    assert logged["incremental"]["clozeline"]["full"] == 1
    return outputs(full)


@pytest.fixture()
def inc(tmp_path):
    """A root with 20 train docs tokenized once (a full run: no cache yet)."""
    paths = write_inputs(tmp_path / "inc", pretrain(20))
    train_tokenizer(paths)
    logged = run(paths)
    assert logged["tokenize.clozeline.mode"] == "full" and logged["incremental"]["clozeline"]["texts_encoded"] == 22
    return paths


def test_new_docs_alone_are_encoded_and_outputs_equal_a_from_scratch_run(inc, tmp_path):
    rows = pretrain(26)  # 6 new train docs, the tokenizer kept (vocab unchanged)
    write_inputs(tmp_path / "inc", rows)
    logged = run(inc)
    for name in ("clozeline", "reference"):
        assert logged[f"tokenize.{name}.mode"] == "incremental"
        assert logged["incremental"][name] == {"texts_encoded": 6, "full": 0, "task_inputs_encoded": 0}
    assert outputs(inc) == from_scratch(tmp_path, rows, inc)
    again = run(inc)["incremental"]
    assert again["clozeline"]["texts_encoded"] == 0 and again["reference"]["task_inputs_encoded"] == 0  # nothing new


def test_new_and_edited_task_rows_alone_are_encoded(inc, tmp_path):
    news = news_rows()
    news[2] = {**news[2], "text": "the market fell"}  # edited: a new input
    news.append({"doc_id": "n:5", "role": "task", "split": "test", "text": "grain ships sail", "label": "tech"})
    tweets = tweet_rows()
    tweets.append(
        {"doc_id": "t:6", "role": "task", "split": "dev", "tokens": ["Lima", "harbour"], "tags": ["B-LOC", "O"]}
    )
    tweets.append({"doc_id": "t:7", "role": "task", "split": "test", "tokens": ["grain"], "tags": ["O"]})  # as t:4
    tweets[0] = {**tweets[0], "split": "dev"}  # moved rows keep their encoding (the U+200B word: replaced, cached)
    write_inputs(tmp_path / "inc", pretrain(20), news=news, tweets=tweets)
    log = RecordingLog()
    metrics = stage.run(tokenize_params(), inc, log)
    for name in ("clozeline", "reference"):
        assert log.logged["incremental"][name]["task_inputs_encoded"] == 3  # n:3 edited, n:5 and t:6 new
        assert log.logged["incremental"][name]["texts_encoded"] == 0
    assert metrics["ner_input"] is not None and metrics["ner"]["clozeline"]["dev"]["zero_subword_words"] == 1
    scratch = write_inputs(tmp_path / "scratch", pretrain(20), news=news, tweets=tweets)
    shutil.copytree(inc.models / "tokenizer", scratch.models / "tokenizer")
    assert stage.run(tokenize_params(incremental=False), scratch, NullLog()) == metrics
    assert outputs(inc) == outputs(scratch)


def test_removed_doc_leaves_the_outputs_and_the_cache(inc, tmp_path):
    rows = pretrain(20, removed=(3,))
    write_inputs(tmp_path / "inc", rows)
    logged = run(inc)
    assert logged["incremental"]["clozeline"]["texts_encoded"] == 0
    assert outputs(inc) == from_scratch(tmp_path, rows, inc)
    cached = pq.read_table(inc.data / "tokenize_cache" / "clozeline" / "ids.parquet")
    assert cached.num_rows == 21  # 19 train + 2 heldout texts: the removed text is not written back


def test_changed_tokenizer_re_encodes_everything(inc, tmp_path):
    rows = pretrain(26)
    write_inputs(tmp_path / "inc", rows)
    train_tokenizer(inc, lowercase=False)  # retrained with another normalizer
    logged = run(inc)
    assert logged["tokenize.clozeline.mode"] == "full"
    assert logged["tokenize.clozeline.reason"].startswith("the tokenizer changed")
    assert logged["incremental"]["clozeline"] == {"texts_encoded": 28, "full": 1, "task_inputs_encoded": 8}
    assert logged["incremental"]["reference"] == {
        "texts_encoded": 6,
        "full": 0,  # the packaged one is unchanged
        "task_inputs_encoded": 0,
    }
    assert outputs(inc) == from_scratch(tmp_path, rows, inc)


def test_incremental_false_encodes_everything(inc):
    logged = run(inc, incremental=False)
    assert logged["tokenize.reference.reason"] == "tokenize.incremental: false"
    assert logged["incremental"]["reference"] == {"texts_encoded": 22, "full": 1, "task_inputs_encoded": 8}


def test_a_task_cache_not_as_written_encodes_every_input(inc):
    path = inc.data / "tokenize_cache" / "clozeline" / "tasks.parquet"
    table = pq.read_table(path)
    nulls = table.set_column(
        table.schema.get_field_index("replaced"), "replaced", pa.array([None] * table.num_rows, pa.int32())
    )
    pq.write_table(nulls.replace_schema_metadata(table.schema.metadata), path)
    logged = run(inc)["incremental"]
    assert logged["clozeline"]["task_inputs_encoded"] == 8 and logged["reference"]["task_inputs_encoded"] == 0


def test_cache_row_groups_end_at_write_bytes_and_serve_the_next_run(tmp_path, monkeypatch):
    """A row group per batch of 4 documents when each batch passes ``WRITE_BYTES`` (long documents): the rows
    are the same, and the next run finds every text in them."""
    monkeypatch.setattr(cache, "WRITE_BYTES", 1)
    rows = pretrain(20)
    paths = write_inputs(tmp_path / "inc", rows)
    train_tokenizer(paths)
    run(paths, map_batch_size_docs=4)
    stored = pq.ParquetFile(paths.data / "tokenize_cache" / "clozeline" / cache.IDS)
    sizes = [stored.metadata.row_group(g).num_rows for g in range(stored.num_row_groups)]
    assert sizes == [4] * 5 + [2]  # 20 train documents, then the 2 heldout ones (not one group of 22)
    monkeypatch.setattr(cache, "WRITE_BYTES", 32 << 20)
    whole = write_inputs(tmp_path / "whole", rows)
    shutil.copytree(paths.models / "tokenizer", whole.models / "tokenizer")
    run(whole, map_batch_size_docs=4)
    one = pq.ParquetFile(whole.data / "tokenize_cache" / "clozeline" / cache.IDS)
    assert one.num_row_groups == 1 and one.read().equals(stored.read())
    logged = run(paths, map_batch_size_docs=4)
    assert logged["incremental"]["clozeline"]["texts_encoded"] == 0 and outputs(paths) == outputs(whole)


def test_stored_rows_are_read_read_bytes_at_a_time_and_serve_the_run(inc, monkeypatch):
    """Batches of the stored rows follow their bytes (``READ_BYTES``): a row a batch at 1 byte, every row read as
    the file holds it, and the next run finds every text there."""
    path = inc.data / "tokenize_cache" / "clozeline" / cache.IDS
    with pq.ParquetFile(path) as parquet:
        group = parquet.metadata.row_group(0)
        assert group.num_rows == 22  # one group: 20 train documents, 2 heldout
        monkeypatch.setattr(cache, "READ_BYTES", group.total_byte_size // 4)
        assert cache.batch_rows(parquet, 0) == 5  # 22 rows * a quarter of the group's bytes, rounded down
        monkeypatch.setattr(cache, "READ_BYTES", 1)
        assert cache.batch_rows(parquet, 0) == 1
    table = pq.read_table(path)
    read = list(cache.stored_rows(path))
    assert [doc for (_, doc), _, _ in read] == table.column("doc_id").to_pylist()
    assert [list(ids) for _, _, ids in read] == table.column("ids").to_pylist()
    before = outputs(inc)
    logged = run(inc)["incremental"]
    assert logged["clozeline"]["texts_encoded"] == 0 and outputs(inc) == before
