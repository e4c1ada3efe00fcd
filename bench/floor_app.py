"""The framework's floor for bench/bench_interactions.py: the cheapest Streamlit app with the same kinds
of input as the Routing explorer (a slider, a button) and a plotly scatter of 896 square markers, the
size of its expert grid. Nothing else; the one line of text is the benchmark's marker of a finished run.

    python -m streamlit run bench/floor_app.py
"""
import plotly.graph_objects as go
import streamlit as st

N, COLS = 896, 28

value = st.slider("Value", 0, 10_000, 0, key="floor_value")
if st.button("Click", key="floor_click"):
    st.session_state["floor_clicks"] = st.session_state.get("floor_clicks", 0) + 1
clicks = st.session_state.get("floor_clicks", 0)
st.text(f"floor value={value} clicks={clicks}")

lit = (value + clicks) % N                     # one square follows the input, so each run redraws the chart
fig = go.Figure(go.Scatter(
    x=[i % COLS for i in range(N)], y=[i // COLS for i in range(N)], mode="markers",
    marker=dict(symbol="square", size=12, color=[1.0 if i == lit else 0.2 for i in range(N)],
                colorscale="Viridis", cmin=0, cmax=1)))
fig.update_layout(title=f"value {value}, clicks {clicks}", height=620, width=520, margin=dict(l=10, r=10, t=40, b=10),
                  xaxis=dict(visible=False), yaxis=dict(visible=False, autorange="reversed"))
st.plotly_chart(fig, key="floor_chart", width="content")
