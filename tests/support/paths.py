"""Where the tests find the project's files: the checkout's root, named once."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
