"""`python -m examples.demo [ARGS...]` (what `python3 build.py demo` runs)."""

from __future__ import annotations

import sys

from examples.demo.pipeline import main

sys.exit(main())
