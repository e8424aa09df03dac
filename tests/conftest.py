import sys
from pathlib import Path

# tests/brute_force.py is a test oracle, importable by the test modules.
sys.path.insert(0, str(Path(__file__).parent))
