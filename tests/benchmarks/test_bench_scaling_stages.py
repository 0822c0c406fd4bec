"""benchmarks/_scaling_stages.py's inputs: the ingest source it writes is ``n`` records in files of ``FILE_DOCS``,
and the split input is dedup-shaped rows the split stage reads, the pretraining sources copied under new ids (the
runs themselves, in fresh processes: ``measured_runs``, which scaling.py's smoke calls)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import _scaling_stages as stages
from tasks.ingest.normalize import ROW_SCHEMA


def _base(folder):
    """Two ingest sources as the ingest stage writes them: a task source of 2 rows, a pretraining one of 3."""
    for name, role, n in (("task", "task", 2), ("web", "pretrain", 3)):
        ids = [f"{name}:{i}" for i in range(n)]
        columns = {"doc_id": ids, "source": [name] * n, "role": [role] * n, "text": [f"text {i}" for i in range(n)]}
        columns |= {"label": ["a"] * n if role == "task" else [None] * n, "group": ids, "meta": ["{}"] * n}
        columns |= {"tokens": [None] * n, "tags": [None] * n}
        (folder / name).mkdir(parents=True)
        pq.write_table(pa.table(columns, schema=ROW_SCHEMA), folder / name / "part-00000.parquet")
    return folder


def test_the_ingest_input_is_n_records_in_files_of_file_docs(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "FILE_DOCS", 4)
    assert stages.ingest_input(_base(tmp_path / "base"), 9, tmp_path / "run") == 9
    files = sorted((tmp_path / "run" / "raw").iterdir())
    lines = [[json.loads(line)["text"] for line in f.read_text().splitlines()] for f in files]
    assert [f.name for f in files] == ["part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
    texts = ["text 0", "text 1", "text 0", "text 1", "text 2"]  # the base's texts, source by source, cycled
    assert sum(lines, []) == [texts[i % 5] for i in range(9)]


def test_the_split_input_copies_the_pretraining_rows_under_new_ids(tmp_path):
    docs = stages.split_input(_base(tmp_path / "base"), 8, tmp_path / "run")  # 2 task rows + 2 copies of 3
    out = tmp_path / "run" / "data" / "dedup"
    task, web = (pq.read_table(out / f"{name}.parquet") for name in ("task", "web"))
    assert docs == 8 and task.num_rows == 2 and web.num_rows == 6
    ids = ["web:0", "web:1", "web:2", "web:0~1", "web:1~1", "web:2~1"]
    assert web.column("doc_id").to_pylist() == ids == web.column("group").to_pylist()
    assert web.column("cluster_id").to_pylist() == ids and not any(web.column("is_duplicate").to_pylist())
    listed = json.loads((out / "manifest.json").read_text())["files"]
    assert listed == {"task": ["task.parquet"], "web": ["web.parquet"]}


def test_several_rounds_keep_the_phases_of_the_round_whose_peak_they_keep(tmp_path, monkeypatch):
    # three rounds peak at 900, 1,200 and 1,000 MiB: the record's driver peak is round 1's, so are its phases
    from benchmarks import scaling

    peaks = iter([900.0, 1_200.0, 1_000.0])

    def measure(stage, engine, scale, docs, stage_dir, *rest):
        peak = next(peaks)
        return {
            "docs_per_s": peak / 10,
            "docs_per_s_per_core": peak / 20,
            "seconds": peak / 100,
            "peak_rss_mib": peak,
            "driver_peak_rss_mib": peak,
            "peak_tree_rss_mib": 2 * peak,
            "phases": [{"message": "(end)", "peak_rss_mib": peak}],
        }

    monkeypatch.setattr(scaling, "measure", measure)
    monkeypatch.setattr(scaling, "provenance", lambda *a, **k: {"commit": "0" * 40})
    source = tmp_path / "scale" / "data" / "split"
    source.mkdir(parents=True)
    [run] = scaling.alternated("leakage", 1, 10, source, ["ray"], 3)
    assert run["driver_peak_rss_mib"] == 1_200.0 and run["phases"] == [{"message": "(end)", "peak_rss_mib": 1_200.0}]
    # the rate is the median round's (1,000 MiB: 100 docs/s), the tree's peak the largest
    assert run["docs_per_s"] == 100.0 and run["peak_tree_rss_mib"] == 2_400.0
