"""``python -m grpo_run ...`` is the ``grpo-run`` command (handy where the script is not on PATH)."""

import sys

from grpo_run.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
