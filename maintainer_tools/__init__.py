"""The maintainers' tools: what ``./build.sh`` and the tests run, and no lesson imports.

``export`` (``#@save`` cells into ``course_utils/lesson_*.py``) with ``publish`` (the lessons' links and
install cell), ``docsite`` (the site), ``run_course`` (``./build.sh course``), ``canary`` (the newest
Ray), ``answered`` (a lesson with its published solutions pasted in), ``cluster`` (the multi-node test
cluster), ``run_tests`` (``./build.sh test``'s pytest), ``clean_data`` (``./build.sh clean --data``) and ``bench/`` (the benchmarks and their pinned
figures). They import ``course_utils``; ``course_utils`` never imports them (tests/unit/test_imports.py),
so the wheel a learner installs holds none of them. Installed beside ``course_utils`` by ``./build.sh
setup`` (``pyproject.toml`` here).
"""
