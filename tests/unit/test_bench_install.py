"""The install bench's parts that need no install: reading pip's output and report, a folder's size on
disk, and the figures it ends with. The bench itself is never run here."""

from __future__ import annotations

import os

import pytest

from maintainer_tools.bench import install


def test_downloaded_bytes_add_up_pip_s_downloading_lines():
    output = """Collecting ray==2.60.0 (from -r requirements.txt (line 5))
  Downloading ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl (71.2 MB)
Processing /opt/wheels/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl
  Downloading filelock-4.2.11-py3-none-any.whl (222 kB)
  Downloading six-1.17.0-py2.py3-none-any.whl (11.0 kB)
  Downloading tiny-1.0-py3-none-any.whl (900 bytes)
Requirement already satisfied: pip
"""
    assert install.downloaded_bytes(output) == 71_200_000 + 222_000 + 11_000 + 900
    assert install.downloaded_bytes("Successfully installed nothing") == 0


def test_local_wheels_are_the_file_urls_of_pip_s_report_largest_first(tmp_path):
    folder = tmp_path / "local dir"
    folder.mkdir()
    (folder / "torch.whl").write_bytes(b"x" * 1234)
    (folder / "six.whl").write_bytes(b"x" * 12)
    local = [("six", "six.whl"), ("torch", "torch.whl")]
    report = {
        "install": [
            {
                "metadata": {"name": name},
                "download_info": {"url": f"file://{folder}/{file}".replace(" ", "%20")},
            }
            for name, file in local
        ]
        + [
            {
                "download_info": {
                    "url": "https://files.pythonhosted.org/packages/ab/ray.whl",
                    "archive_info": {},
                }
            },
            {
                "download_info": {"url": f"file://{tmp_path}", "dir_info": {"editable": True}}
            },  # -e .: no wheel
        ]
    }
    assert install.local_wheels(report) == (("torch", 1234), ("six", 12))


def test_disk_usage_counts_blocks_and_a_hard_link_once(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 10_000)
    os.link(tmp_path / "a", tmp_path / "b")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c").write_bytes(b"y" * 100)
    size = install.disk_usage(tmp_path)
    assert 10_100 <= size < 10_100 + 5 * 8192  # each file rounds up to its blocks, folders take a few


def test_figures_end_with_after_over_before_for_all_wheels():
    mb = install.MB
    before = install.Install(100.0, 300 * mb, 3000 * mb, 7000 * mb, 230)
    after = install.Install(80.0, 200 * mb, 3000 * mb, 6500 * mb, 180)
    values = install.figures(before, after)
    assert values["before_wheels_mb"] == 3300 and values["after_wheels_mb"] == 3200
    assert (
        values["seconds_saved"] == 20 and values["venv_mb_saved"] == 500 and values["packages_left_out"] == 50
    )
    assert list(values)[-1] == "after_over_before_wheels"
    assert values["after_over_before_wheels"] == pytest.approx(3200 / 3300)


def test_the_bench_installs_the_learner_file_first_and_both_files_before():
    assert install.VARIANTS == {
        "after": ("requirements.txt",),
        "before": ("requirements.txt", "requirements-dev.txt"),
    }
