"""Running the CLI where file permissions hold: root reads through them (CAP_DAC_OVERRIDE), so
as root the command runs under `setpriv` with those capabilities dropped."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

DROP_BYPASS = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]

needs_permissions = pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None,
    reason="as root, file permissions hold only under setpriv (util-linux)",
)


def run_cli(*args: object) -> subprocess.CompletedProcess[str]:
    """`python -m wmo_lake.cli ARGS`, unable to read what its user may not."""
    command = [sys.executable, "-m", "wmo_lake.cli", *map(str, args)]
    if os.geteuid() == 0:
        command = DROP_BYPASS + command
    return subprocess.run(command, capture_output=True, text=True)
