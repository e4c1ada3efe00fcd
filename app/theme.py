"""Colours: the Okabe-Ito palette, safe for the common colour-vision deficiencies and legible on both
the light and the dark Streamlit theme (no pure black or white marks)."""
OKABE_ITO = {
    "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
    "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#999999",
}
# One colour per concept, used the same way on every page.
KDA = OKABE_ITO["sky"]
MLA = OKABE_ITO["vermillion"]
DENSE = OKABE_ITO["yellow"]
MOE = OKABE_ITO["green"]
K2 = OKABE_ITO["grey"]
K3 = OKABE_ITO["blue"]
ACCENT = OKABE_ITO["orange"]
SEQUENCE = [OKABE_ITO[k] for k in ("blue", "orange", "green", "vermillion", "purple", "sky", "yellow", "grey")]


INK = {"light": "#31333f", "dark": "#fafafa"}   # Streamlit's text colour in its light and dark theme


def ink(theme_type: str | None) -> str:
    """Text colour for marks drawn on a chart's canvas (which the chart's theme does not colour), for
    st.context.theme.type; mid grey, readable on both, when the theme is not known."""
    return INK.get(theme_type, "#808080")


PAPER = {"light": "#ffffff", "dark": "#0e1117"}   # Streamlit's page background in its light and dark theme


def paper(theme_type: str | None) -> str | None:
    """The page's background colour for st.context.theme.type (None when not known), e.g. for a halo
    that keeps a label readable where it crosses a line."""
    return PAPER.get(theme_type)
