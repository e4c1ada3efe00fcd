"""The CSV behind every chart: app.export.spec_frame against specs whose data we know, and safe file names."""
import pandas as pd

from app.export import file_stem, spec_frame


def test_every_dataset_row_is_in_the_table_with_its_dataset_first():
    spec = {"datasets": {"loss": [{"step": 1, "ce": 4.0}, {"step": 2, "ce": 3.5}],
                         "marks": pd.DataFrame({"step": [2], "label": ["best"]})}}
    df = spec_frame(spec)
    assert list(df.columns) == ["dataset", "step", "ce", "label"]
    assert list(df["dataset"]) == ["loss", "loss", "marks"]
    assert list(df["step"]) == [1, 2, 2]
    assert df.loc[1, "ce"] == 3.5 and pd.isna(df.loc[2, "ce"]) and df.loc[2, "label"] == "best"


def test_a_spec_without_rows_gives_an_empty_table():
    assert spec_frame({}).empty and list(spec_frame({}).columns) == ["dataset"]
    assert spec_frame({"datasets": {"empty": []}}).empty


def test_csv_quotes_odd_values_and_file_names_are_safe():
    csv = spec_frame({"datasets": {"d": [{"name": 'a,"b"', "v": 1}]}}).to_csv(index=False)
    assert csv.splitlines() == ["dataset,name,v", 'd,"a,""b""",1']
    assert file_stem("Grid of 896 experts at layer 46!") == "grid-of-896-experts-at-layer-46"
    assert file_stem("<script>../../etc</script>") == "script-etc-script"
    assert file_stem("😀") == "k3-explorer-chart"
