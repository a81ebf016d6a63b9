"""The study server and its export start without torch: a restart after a crash must take seconds, not the
10-15 s that importing torch costs on a busy 2-core machine, because participants wait through it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLOCK_TORCH = "import sys\nfor name in ('torch', 'torchvision', 'timm'):\n    sys.modules[name] = None\n"


def test_serve_study_imports_without_torch() -> None:
    code = BLOCK_TORCH + (
        "import runpy\n"
        "import controversial.tasks.serve_study\n"
        "runpy.run_path('serve_study.py', run_name='not_main')\n"
        "from controversial.config import load_model_config, model_config_files\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_serve_study_help_runs_without_torch() -> None:
    code = BLOCK_TORCH + (
        "import runpy\nsys.argv = ['serve_study.py', '--help']\nrunpy.run_path('serve_study.py', run_name='__main__')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "completion_code" in result.stdout
