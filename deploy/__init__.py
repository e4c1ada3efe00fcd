"""Serving K3 Explorer to a class or a school: nginx in front of N Streamlit replicas.

deploy/nginx.py renders the nginx configuration, deploy/launcher.py is `python -m deploy`, and
deploy/protocol.py is a browser-less client of Streamlit's websocket protocol (warm-up, benchmarks).
"""
