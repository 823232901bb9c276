"""The one test harness every suite shares: the real gateway and launcher,
the prerequisites, and what each suite cost (plugin.py, loaded by
tests/conftest.py)."""
