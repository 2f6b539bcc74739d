"""`python3 -m thrash` (from scripts/, as scripts/thrash.sh runs it)."""

from .main import main

main()
