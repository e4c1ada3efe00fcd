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


def test_a_pointers_bands_are_not_in_the_table():
    """Bands a pointer reads (a dataset named ..._hover) and the drawn samples of a curve (..._thin) repeat rows of
    another dataset: the CSV leaves them out."""
    spec = {"datasets": {"curve": pd.DataFrame({"x": [0, 1, 2]}), "curve_hover": pd.DataFrame({"x": [0, 2]}),
                         "curve_thin": pd.DataFrame({"x": [0, 2]}), "hover_notes": [{"x": 1}]}}
    assert list(spec_frame(spec)["dataset"]) == ["curve", "curve", "curve", "hover_notes"]


def test_a_spec_without_rows_gives_an_empty_table():
    assert spec_frame({}).empty and list(spec_frame({}).columns) == ["dataset"]
    assert spec_frame({"datasets": {"empty": []}}).empty


def test_csv_quotes_odd_values_and_file_names_are_safe():
    csv = spec_frame({"datasets": {"d": [{"name": 'a,"b"', "v": 1}]}}).to_csv(index=False)
    assert csv.splitlines() == ["dataset,name,v", 'd,"a,""b""",1']
    assert file_stem("Grid of 896 experts at layer 46!") == "grid-of-896-experts-at-layer-46"
    assert file_stem("<script>../../etc</script>") == "script-etc-script"
    assert file_stem("😀") == "k3-explorer-chart"


# ---- the Arrow bytes a chart's data frames travel as ----------------------------------------------------

def test_chart_frames_are_converted_once_to_the_bytes_streamlit_sends(monkeypatch):
    import gc

    import pyarrow as pa
    from streamlit import dataframe_util

    from app import ui
    calls = []
    convert = dataframe_util.convert_anything_to_arrow_bytes
    monkeypatch.setattr(dataframe_util, "convert_anything_to_arrow_bytes", lambda df: calls.append(1) or convert(df))
    df = pd.DataFrame({"expert": [3, 1, 2], "line": ["chosen", "–", "knocked out"]})
    spec = {"mark": "point", "datasets": {"experts": df, "raw": [{"a": 1}]}}
    sent = ui.arrow_spec(spec)
    assert sent is not spec and spec["datasets"]["experts"] is df                  # the spec itself unchanged
    assert sent["datasets"]["raw"] == [{"a": 1}]                                   # not a frame: as it was
    table = pa.ipc.open_stream(sent["datasets"]["experts"]).read_all().to_pandas()  # the same rows, read back
    assert list(table["expert"]) == [3, 1, 2] and list(table["line"]) == ["chosen", "–", "knocked out"]
    assert ui.arrow_spec(spec)["datasets"]["experts"] == sent["datasets"]["experts"] and len(calls) == 1
    df["expert2"] = 0                                         # a frame changed after it was drawn: converted again
    assert ui.arrow_spec(spec)["datasets"]["experts"] != sent["datasets"]["experts"] and len(calls) == 2
    key = id(df)
    del spec, df
    gc.collect()
    assert key not in ui._ARROW                                # the memo goes with the frame
    assert ui.arrow_spec({"mark": "bar"}) == {"mark": "bar"}   # no datasets: nothing to do


def test_a_chart_drawn_from_arrow_bytes_is_the_chart_drawn_from_its_frames():
    from streamlit.testing.v1 import AppTest

    def page():
        import pandas as pd
        import streamlit as st

        from app import ui
        df = pd.DataFrame({"x": [1, 2, 3], "y": [0.5, 0.25, 0.125]})
        spec = {"mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}},
                "data": {"name": "d"}, "datasets": {"d": df}}
        st.vega_lite_chart(spec, key="frames")
        st.vega_lite_chart(ui.arrow_spec(spec), key="bytes")

    at = AppTest.from_function(page).run()
    assert not at.exception
    a, b = (c.proto for c in at.get("vega_lite_chart"))
    assert a.spec == b.spec and [d.name for d in a.datasets] == [d.name for d in b.datasets] == ["d"]
    assert a.datasets[0].data.data == b.datasets[0].data.data
