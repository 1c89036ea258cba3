"""``python -m parinfo`` runs the CLI."""
from parinfo.cli import main

if __name__ == "__main__":
    main()
