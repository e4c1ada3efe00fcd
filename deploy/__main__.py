"""python -m deploy: N Streamlit replicas behind a private nginx (see deploy/launcher.py and docs/DEPLOY.md)."""
import sys

from deploy.launcher import main

sys.exit(main())
