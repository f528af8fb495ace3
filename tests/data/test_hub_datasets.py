"""The paper's hub datasets, offline: fixtures in the exact hub schemas (XSum, WMT18 de-en, Dolly 15k), saved as
Parquet and as `save_to_disk` Arrow directories, read through the same `load_hub` path as the hub ids and checked
field by field. Also the dataset-level bad inputs (non-UTF-8 bytes, a non-string reference, too many prompts)."""

import json
from dataclasses import replace

import datasets
import pytest

from helpers.config import run_cfg
from rsd.data import BUILTIN_DIR, DatasetError, dataset_status, load_examples, read_jsonl
from rsd.harness.schema import Dataset
from rsd.harness.selection import split_tuning

XSUM = [{"document": f"Article {i} about the harbour.\nSecond line {i}.", "summary": f"Summary {i}.",
         "id": str(30000000 + 7 * i)} for i in range(6)]
WMT = [{"translation": {"de": f"Satz {i} auf Deutsch.", "en": f"Sentence {i} in English."}} for i in range(5)]
DOLLY = [{"instruction": "Name a colour.", "context": "", "response": "Blue.", "category": "open_qa"},
         {"instruction": "Who wrote it?", "context": "The book was written by Ada.", "response": "Ada.",
          "category": "closed_qa"},
         {"instruction": "Summarise.", "context": "   ", "response": "Nothing.", "category": "summarization"},
         {"instruction": "Add 2 and 2.", "context": "Use base 10.", "response": "4", "category": "classification"}]


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path, monkeypatch):
    """`datasets` converts local files into its cache: keep that inside the test's tmp dir."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-datasets-cache"))


def dataset_cfg(name: str, hub_id, *overrides: str) -> Dataset:
    return run_cfg(f"dataset={name}", f"dataset.hub_id={hub_id}", *overrides).dataset


def write_parquet(rows: list[dict], path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(rows).to_parquet(str(path))


def check_xsum(examples, rows=XSUM):
    assert [ex.id for ex in examples] == [r["id"] for r in rows]
    for ex, r in zip(examples, rows):
        assert ex.prompt == "Summarize the following news article in one sentence.\n\nArticle: " + r["document"]
        assert ex.reference == r["summary"]


def test_xsum_parquet_directory_with_split_files(tmp_path):
    write_parquet(XSUM, tmp_path / "xsum" / "data" / "test-00000-of-00001.parquet")
    write_parquet(XSUM[:2], tmp_path / "xsum" / "data" / "train-00000-of-00001.parquet")
    cfg = dataset_cfg("xsum", tmp_path / "xsum", "dataset.num_prompts=null")
    check_xsum(load_examples(cfg))  # the test split, not train
    assert [ex.id for ex in load_examples(replace(cfg, num_prompts=4))] == [r["id"] for r in XSUM[:4]]


def test_xsum_save_to_disk_dict_and_a_single_parquet_file(tmp_path):
    datasets.DatasetDict({"test": datasets.Dataset.from_list(XSUM),
                          "train": datasets.Dataset.from_list(XSUM[:1])}).save_to_disk(str(tmp_path / "arrow"))
    check_xsum(load_examples(dataset_cfg("xsum", tmp_path / "arrow", "dataset.num_prompts=6")))
    write_parquet(XSUM, tmp_path / "xsum.parquet")
    check_xsum(load_examples(dataset_cfg("xsum", tmp_path / "xsum.parquet", "dataset.num_prompts=6")))
    with pytest.raises(DatasetError, match=r"no split 'test'.*\['train', 'validation'\]"):
        datasets.DatasetDict({"train": datasets.Dataset.from_list(XSUM),
                              "validation": datasets.Dataset.from_list(XSUM)}).save_to_disk(str(tmp_path / "nt"))
        load_examples(dataset_cfg("xsum", tmp_path / "nt"))


def check_wmt(examples):
    assert [ex.id for ex in examples] == [str(i) for i in range(len(WMT))]  # id_field: null -> row index
    for ex, r in zip(examples, WMT):
        assert ex.prompt == ("Translate the following German text into English.\n\nGerman: "
                             + r["translation"]["de"])
        assert ex.reference == r["translation"]["en"]


def test_wmt_subset_directory_and_subset_on_a_directory_without_configs(tmp_path):
    # `hf download wmt/wmt18 --repo-type dataset` lays the files out per config: de-en/test-*.parquet
    write_parquet(WMT, tmp_path / "wmt18" / "de-en" / "test-00000-of-00001.parquet")
    write_parquet(WMT[:1], tmp_path / "wmt18" / "cs-en" / "test-00000-of-00001.parquet")
    cfg = dataset_cfg("wmt", tmp_path / "wmt18", "dataset.num_prompts=5")
    assert cfg.subset == "de-en"
    check_wmt(load_examples(cfg))
    # a save_to_disk directory has no named configs: subset de-en must not break it
    datasets.DatasetDict({"test": datasets.Dataset.from_list(WMT)}).save_to_disk(str(tmp_path / "arrow"))
    check_wmt(load_examples(dataset_cfg("wmt", tmp_path / "arrow", "dataset.num_prompts=5")))


def test_dolly_context_handling_parquet_and_arrow(tmp_path):
    write_parquet(DOLLY, tmp_path / "dolly" / "databricks-dolly-15k.parquet")  # one file: the split is 'train'
    datasets.Dataset.from_list(DOLLY).save_to_disk(str(tmp_path / "dolly_arrow"))  # a Dataset, not a dict
    for source in (tmp_path / "dolly", tmp_path / "dolly_arrow"):
        examples = load_examples(dataset_cfg("dolly", source, "dataset.num_prompts=4"))
        assert [ex.prompt for ex in examples] == [
            "Name a colour.",                                          # empty context: plain template
            "Who wrote it?\n\nContext: The book was written by Ada.",  # context: the context template
            "Summarise.",                                              # whitespace-only context counts as none
            "Add 2 and 2.\n\nContext: Use base 10."]
        assert [ex.reference for ex in examples] == [r["response"] for r in DOLLY]
        assert [ex.id for ex in examples] == ["0", "1", "2", "3"]


def test_shuffle_seed_is_reproducible_and_keeps_ids(tmp_path):
    write_parquet(XSUM, tmp_path / "x" / "test.parquet")
    by_id = {r["id"]: r for r in XSUM}
    pick = [load_examples(dataset_cfg("xsum", tmp_path / "x", "dataset.num_prompts=3",
                                      f"dataset.shuffle_seed={s}")) for s in (1, 1, 2)]
    assert [ex.id for ex in pick[0]] == [ex.id for ex in pick[1]]  # same seed, same prompts
    assert [ex.id for ex in pick[0]] != [ex.id for ex in pick[2]]
    assert [ex.id for ex in pick[0]] != [r["id"] for r in XSUM[:3]]  # not file order
    for ex in pick[0]:
        assert ex.reference == by_id[ex.id]["summary"]  # a row keeps its own id and reference
    more = load_examples(dataset_cfg("xsum", tmp_path / "x", "dataset.num_prompts=5", "dataset.shuffle_seed=1"))
    assert [ex.id for ex in more[:3]] == [ex.id for ex in pick[0]]  # growing num_prompts extends the choice
    builtin = [ex.id for ex in load_examples(run_cfg("dataset=dolly_builtin", "dataset.shuffle_seed=7",
                                                            "dataset.num_prompts=8").dataset)]
    in_order = [ex.id for ex in load_examples(Dataset("dolly_builtin", num_prompts=8))]
    assert len(set(builtin)) == 8 and builtin != in_order


def test_num_prompts_larger_than_the_dataset_says_how_many_exist(tmp_path):
    write_parquet(XSUM, tmp_path / "x" / "test.parquet")
    with pytest.raises(DatasetError, match=r"dataset.num_prompts=7, but .* has only 6 prompts"):
        load_examples(dataset_cfg("xsum", tmp_path / "x", "dataset.num_prompts=7"))
    total = len(read_jsonl(BUILTIN_DIR / "wmt.jsonl"))
    with pytest.raises(DatasetError, match=f"has only {total} prompts"):
        load_examples(run_cfg("dataset=wmt_builtin", f"dataset.num_prompts={total + 1}").dataset)


def test_missing_local_copy_and_missing_hub_dataset_say_what_to_do(tmp_path):
    with pytest.raises(DatasetError, match="looks like a local path, but it does not exist"):
        load_examples(dataset_cfg("xsum", tmp_path / "nowhere"))
    cfg = dataset_cfg("xsum", "rsd-test/no-such-dataset")
    ok, how = dataset_status(cfg)
    assert not ok and "hf download rsd-test/no-such-dataset --repo-type dataset" in how
    write_parquet(XSUM, tmp_path / "x" / "test.parquet")
    assert dataset_status(dataset_cfg("xsum", tmp_path / "x"))[0]


def local_cfg(path) -> Dataset:
    return run_cfg("dataset=local", f"dataset.path={path}").dataset


def test_local_file_with_non_utf8_bytes_is_one_line_error(tmp_path):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"prompt": "ok"}\n' + '{"prompt": "Gr\u00fc\u00dfe"}\n'.encode("latin-1"))
    with pytest.raises(DatasetError, match=r"latin1.jsonl:2 is not UTF-8 text \(byte b'\\xfc' at column 15\)") as e:
        load_examples(local_cfg(bad))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("reference", [3, ["a", "b"], {"text": "a"}, True])
def test_local_reference_that_is_not_a_string(tmp_path, reference):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "a"}) + "\n" + json.dumps({"prompt": "b", "reference": reference}) + "\n")
    with pytest.raises(DatasetError, match=f"record 2 has a 'reference' that is a {type(reference).__name__}, not a "
                                           "string") as e:
        load_examples(local_cfg(path))
    assert "\n" not in str(e.value)


def test_hub_reference_field_that_is_not_a_string(tmp_path):
    write_parquet(WMT, tmp_path / "w" / "test.parquet")
    with pytest.raises(DatasetError, match="reference field 'translation' holds a dict, not a string"):
        load_examples(dataset_cfg("wmt", tmp_path / "w", "dataset.reference_field=translation",
                                  "dataset.num_prompts=5"))


def test_builtin_sets_hold_48_evaluation_prompts_and_8_disjoint_tuning_prompts():
    """Each built-in file: ids `<set>-01`, `<set>-02`, ... in file order, one key order for every row, and room for
    the study's split (48 evaluation prompts, 8 tuning prompts from the end) with no prompt text in both."""
    for name in ("dolly", "xsum", "wmt"):
        rows = read_jsonl(BUILTIN_DIR / f"{name}.jsonl")
        assert [r["id"] for r in rows] == [f"{name}-{i:02d}" for i in range(1, len(rows) + 1)]
        assert all(list(r) == list(rows[0]) for r in rows)
        evaluation, tuning = split_tuning(load_examples(Dataset(f"{name}_builtin")), 48, 8)
        assert {ex.prompt for ex in tuning}.isdisjoint(ex.prompt for ex in evaluation)


def test_builtin_rows_round_trip_through_the_hub_path(tmp_path):
    """The built-in files use the hub field names: saved as Parquet they load through load_hub unchanged."""
    rows = read_jsonl(BUILTIN_DIR / "dolly.jsonl")
    write_parquet(rows, tmp_path / "d" / "train.parquet")
    hub = load_examples(dataset_cfg("dolly", tmp_path / "d", "dataset.num_prompts=32", "dataset.id_field=id"))
    assert hub == load_examples(Dataset("dolly_builtin", num_prompts=32))
