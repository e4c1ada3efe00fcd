"""What every Vega-Lite spec of the app shares: the schema it is written against and its usermeta (the
chart's name, which tests and the benchmark find it by, and the renderer vega-embed draws it with)."""
SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"


def usermeta(name: str, renderer: str = "canvas") -> dict:
    return {"chart": name, "embedOptions": {"renderer": renderer}}
