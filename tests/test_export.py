"""The CSV behind every chart: app.export.figure_frame against figures whose data we know."""
import plotly.graph_objects as go

from app.export import figure_frame, file_stem


def test_scatter_and_bar_rows_carry_their_points():
    fig = go.Figure([go.Scatter(x=[1, 2, 3], y=[4.0, 5.0, 6.0], name="loss"),
                     go.Bar(x=["a", "b"], y=[7, 8])])
    df = figure_frame(fig)
    assert list(df["series"]) == ["loss"] * 3 + ["trace 2"] * 2
    assert list(df["kind"]) == ["scatter"] * 3 + ["bar"] * 2
    assert list(df["y"]) == [4.0, 5.0, 6.0, 7, 8]
    assert list(df["x"])[3:] == ["a", "b"]


def test_heatmap_becomes_one_row_per_cell_with_its_coordinates():
    z = [[1, 2, 3], [4, 5, 6]]
    df = figure_frame(go.Figure(go.Heatmap(z=z, x=["p", "q", "r"], y=["u", "v"])))
    assert len(df) == 6
    cell = df[(df["x"] == "r") & (df["y"] == "u")]
    assert list(cell["z"]) == [3]                       # row u, column r
    assert list(df[(df["x"] == "p") & (df["y"] == "v")]["z"]) == [4]


def test_heatmap_without_axes_uses_indices_and_empty_figure_is_empty():
    df = figure_frame(go.Figure(go.Heatmap(z=[[0.5, 0.25]])))
    assert list(df["x"]) == [0, 1] and list(df["y"]) == [0, 0]
    assert figure_frame(go.Figure()).empty


def test_csv_round_trip_and_safe_file_names():
    csv = figure_frame(go.Figure(go.Scatter(x=[0, 1], y=[1, 0], name='a,"b"'))).to_csv(index=False)
    assert csv.splitlines()[0] == "series,kind,x,y" and '"a,""b"""' in csv
    assert file_stem("Grid of 896 experts at layer 46!") == "grid-of-896-experts-at-layer-46"
    assert file_stem("<script>../../etc</script>") == "script-etc-script"
    assert file_stem("😀") == "k3-explorer-chart"
