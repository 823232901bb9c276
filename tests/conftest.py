"""Every suite under tests/ runs on one harness, tests/support: this puts it
on the path and loads its plugin, so `pytest tests/` collects every suite in
one session and any one suite runs alone the same way."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest_plugins = ["support.plugin"]
