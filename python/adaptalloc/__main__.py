"""python -m adaptalloc: the command line for a running job (cli.py)."""
import sys

from .cli import main

sys.exit(main())
