"""`python -m fluxnode` runs the CLI (tests and the test-size launcher use it)."""

from fluxnode.cli import main

if __name__ == "__main__":
    main()
