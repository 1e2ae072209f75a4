"""`python -m batchpredict`: the `batchpredict` command."""
import sys

from .cli import main

if __name__ == "__main__":  # a process that imports the main module again (multiprocessing's spawn) runs nothing
    sys.exit(main())
