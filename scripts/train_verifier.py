"""Train medverify's built-in verifier (thin wrapper over ``medverify train verifier``).

.venv/bin/python scripts/train_verifier.py                # full run -> shipped weights
.venv/bin/python scripts/train_verifier.py --smoke --out /tmp/v   # a few steps, tiny data
"""

from __future__ import annotations

import sys

from medverify.cli import main

if __name__ == "__main__":
    main(["train", "verifier", *sys.argv[1:]])
