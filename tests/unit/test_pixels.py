"""course_utils.pixels stays light: a Ray Data inference actor imports it without torchvision."""

import subprocess
import sys


def test_inference_imports_neither_torchvision_nor_the_data_module():
    code = (
        "import sys, course_utils.inference; "
        "print(sorted(m for m in ('torchvision', 'course_utils.data') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
