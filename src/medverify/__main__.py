"""``python -m medverify`` runs the CLI."""

from medverify.cli import main

if __name__ == "__main__":
    main()
